package main

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a flag value of bytes: a plain number, or one with a binary
// suffix Ki, Mi, Gi or Ti (as Kubernetes quantities spell them).
type byteSize uint64

func (b *byteSize) String() string { return strconv.FormatUint(uint64(*b), 10) }

func (b *byteSize) Type() string { return "bytes" }

func (b *byteSize) Set(s string) error {
	mult := uint64(1)
	num := strings.TrimSpace(s)
	for i, suf := range []string{"Ki", "Mi", "Gi", "Ti"} {
		if strings.HasSuffix(num, suf) {
			mult, num = 1<<(10*(i+1)), strings.TrimSuffix(num, suf)
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || (mult > 1 && n > ^uint64(0)/mult) {
		return fmt.Errorf("%q is not a byte count (a number, optionally with Ki, Mi, Gi or Ti)", s)
	}
	*b = byteSize(n * mult)
	return nil
}
