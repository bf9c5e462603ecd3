package datadir

import (
	"fmt"
	"strconv"
)

// RegistrationFile is the name of the registration file inside the data
// directory [ID-2].
const RegistrationFile = "registration"

// registrationMagic heads the registration file; /1 is the format version.
const registrationMagic = "felix-registration/1"

// Incarnation is the number the control plane gives a node at each
// registration. It only grows for a given node while the control plane
// keeps its registry.
type Incarnation uint64

// encodeRegistrationFile renders the registration file:
//
//	felix-registration/1 incarnation=<decimal> crc32c=<8 hex>\n
func encodeRegistrationFile(inc Incarnation) []byte {
	return encodeLine(registrationMagic, []field{{"incarnation", strconv.FormatUint(uint64(inc), 10)}})
}

// decodeRegistrationFile parses the registration file. The number must be
// canonical decimal (no sign, no leading zero). Every failure wraps
// errCorruptFile.
func decodeRegistrationFile(data []byte) (Incarnation, error) {
	v, err := decodeLine(registrationMagic, []string{"incarnation"}, data)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", RegistrationFile, err)
	}
	n, err := strconv.ParseUint(v[0], 10, 64)
	if err != nil || strconv.FormatUint(n, 10) != v[0] {
		return 0, fmt.Errorf("%s: %w: incarnation %q is not canonical decimal", RegistrationFile, errCorruptFile, v[0])
	}
	return Incarnation(n), nil
}
