package main

import (
	"fmt"
	"strings"
)

// The Redis keys of each kind of primitive, named as the library names
// them: PREFIX:T for a Mutex's lock hash and PREFIX:KIND:T for every other
// key, T being the name with its Cluster hash tag (see tagged). Channels
// are not keys and are left out.
var kindKeys = map[string][]string{
	"mutex":     {"", "q", "w"},
	"fair":      {"fair", "fairq", "fairw"},
	"rw":        {"rw", "rwr", "rwwq", "rwrq", "rwpass", "rwfence"},
	"semaphore": {"sem", "semh", "semq", "semqt"},
	"latch":     {"latch"},
}

// keysOf returns the keys of the primitive of kind (a key of kindKeys)
// named name under prefix.
func keysOf(prefix, kind, name string) []string {
	t := tagged(name)
	var keys []string
	for _, k := range kindKeys[kind] {
		if k == "" {
			keys = append(keys, prefix+":"+t)
		} else {
			keys = append(keys, prefix+":"+k+":"+t)
		}
	}
	return keys
}

// tagged is name with its Cluster hash tag, as the library tags it: {name}
// for a name without braces, :name for a name with a hash tag of its own,
// and {#hhhh}:name, tagged with the name's slot, for any other name with
// braces.
func tagged(name string) string {
	switch {
	case !strings.ContainsAny(name, "{}"):
		return "{" + name + "}"
	case hasHashTag(name):
		return ":" + name
	default:
		return fmt.Sprintf("{#%04x}:%s", slotHash(name), name)
	}
}

// hasHashTag reports whether Redis Cluster would hash s by a tag: a '{'
// followed, later, by a '}' with at least one byte between them.
func hasHashTag(s string) bool {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return false
	}
	return strings.IndexByte(s[i+1:], '}') > 0
}

// slotHash is the Redis Cluster slot of a key: CRC16 (XMODEM) of its hash
// tag, or of the whole key when it has none, modulo 16384.
func slotHash(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}
