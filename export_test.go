package redisync

// RedisAddrForExamples gives the examples, in package redisync_test, the
// address of the test Redis server.
var RedisAddrForExamples = redisAddr
