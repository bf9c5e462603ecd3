package felixd

import (
	"strconv"

	"felix.dev/felix/broker/record"
)

// Header keys felixd writes. Every record and trim a holder writes carries
// HeaderEpoch (the lease epoch in decimal) and HeaderKind.
const (
	// HeaderEpoch carries the writing holder's lease epoch, in decimal.
	HeaderEpoch = "felixd-epoch"
	// HeaderKind says what a felixd record is: KindFence, KindOutput,
	// KindSnapshot or KindTrim.
	HeaderKind = "felixd-kind"
)

// Values of HeaderKind.
const (
	// KindFence marks a holder's fenced write, its first record.
	KindFence = "fence"
	// KindOutput marks a workload output record.
	KindOutput = "output"
	// KindSnapshot marks a snapshot of the workload's state: the state
	// after every record below it.
	KindSnapshot = "snapshot"
	// KindTrim marks the headers of a trim.
	KindTrim = "trim"
)

// headersFor returns the headers of a record of kind written at epoch.
func headersFor(epoch uint64, kind string) []record.Header {
	return []record.Header{
		{Key: HeaderEpoch, Value: []byte(strconv.FormatUint(epoch, 10))},
		{Key: HeaderKind, Value: []byte(kind)},
	}
}

// headerValue returns the first value of key, and whether it is present.
func headerValue(hs []record.Header, key string) ([]byte, bool) {
	for _, h := range hs {
		if h.Key == key {
			return h.Value, true
		}
	}
	return nil, false
}

// EpochOf returns the felixd epoch carried by headers, and false when they
// carry none (a record felixd did not write) or an undecodable one.
func EpochOf(hs []record.Header) (uint64, bool) {
	v, ok := headerValue(hs, HeaderEpoch)
	if !ok {
		return 0, false
	}
	e, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, false
	}
	return e, true
}

// KindOf returns the felixd kind carried by headers, or "" when absent.
func KindOf(hs []record.Header) string {
	v, _ := headerValue(hs, HeaderKind)
	return string(v)
}
