package felixd

import (
	"fmt"

	"felix.dev/felix/broker/record"
)

// CheckStaleTrimRefused checks seed 004's invariant StaleTrimRefused on a
// stream's contents in offset order, trim records included (as storage
// keeps them): no write or trim from one holder follows a write from a
// newer holder. Records without a felixd epoch are ignored. It returns nil
// or an error naming the first offending record.
func CheckStaleTrimRefused(recs []record.Record) error {
	var newest, newestAt uint64
	for _, r := range recs {
		e, ok := EpochOf(r.Headers)
		if !ok {
			continue
		}
		if e < newest {
			return fmt.Errorf("StaleTrimRefused broken: %s from epoch %d at offset %d follows a write from epoch %d at offset %d",
				r.Kind, e, r.Offset, newest, newestAt)
		}
		if r.Kind == record.KindData && e > newest {
			newest, newestAt = e, r.Offset
		}
	}
	return nil
}
