package recon

import "encoding/binary"

// digitPairs holds "00" through "99".
const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// decimalLen is the number of decimal digits of v (1 for 0). Term and range numbers have at
// most ten digits; the compare chain is cheaper there than a logarithm and a power table.
func decimalLen(v uint64) int {
	n := 1
	for v >= 1e10 {
		v /= 1e10
		n += 10
	}
	switch {
	case v < 10:
	case v < 100:
		n++
	case v < 1e3:
		n += 2
	case v < 1e4:
		n += 3
	case v < 1e5:
		n += 4
	case v < 1e6:
		n += 5
	case v < 1e7:
		n += 6
	case v < 1e8:
		n += 7
	case v < 1e9:
		n += 8
	default:
		n += 9
	}
	return n
}

// appendUint is strconv.AppendUint(b, v, 10) written in place, two digits at a time, without
// the intermediate buffer and copy (the writer formats ~10 numbers per term).
func appendUint(b []byte, v uint64) []byte {
	if v < 10 {
		return append(b, byte('0'+v))
	}
	n := decimalLen(v)
	l := len(b)
	if cap(b)-l < n {
		b = append(b, make([]byte, n)...)
	} else {
		b = b[:l+n]
	}
	d := b[l : l+n]
	for len(d) >= 2 && v >= 100 {
		q := v / 100
		r := 2 * (v - 100*q) % uint64(len(digitPairs)-1)
		d[len(d)-1], d[len(d)-2] = digitPairs[r+1], digitPairs[r]
		d = d[:len(d)-2]
		v = q
	}
	if v >= 10 && len(d) >= 2 {
		r := 2 * v % uint64(len(digitPairs)-1)
		d[1], d[0] = digitPairs[r+1], digitPairs[r]
	} else if len(d) >= 1 {
		d[0] = byte('0' + v)
	}
	return b
}

// needsEscape reports whether s holds a byte that a JSON string cannot carry as it is: a control
// character, '"', '\\', or any byte >= 0x80 (left to the careful path in appendEscaped). It reads
// eight bytes at a time; the tests compare it with the byte-by-byte definition.
func needsEscape(s []byte) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for len(s) >= 8 {
		x := binary.LittleEndian.Uint64(s)
		q := x ^ ('"' * ones)
		e := x ^ ('\\' * ones)
		// (y - ones) &^ y & highs is nonzero iff some byte of y is zero; (x - 0x20*ones) &^ x
		// flags a byte below 0x20; x & highs a byte >= 0x80.
		if ((q-ones)&^q|(e-ones)&^e|(x-0x20*ones)&^x|x)&highs != 0 {
			return true
		}
		s = s[8:]
	}
	for _, c := range s {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return true
		}
	}
	return false
}
