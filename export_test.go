package redisync

// RedisAddrForExamples gives the examples, in package redisync_test, the
// address of the test Redis server.
var RedisAddrForExamples = redisAddr

// ClientForExamples gives the examples a Client connected to that server,
// shared by them and closed after the last one.
var ClientForExamples = clientForExamples
