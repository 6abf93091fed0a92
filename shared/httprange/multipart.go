package httprange

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
)

// Framing of `206 multipart/byteranges` answers, shared by every tier that serves byte ranges.
// The parts are framed as mime/multipart writes them, which is what the Xet clients parse: a
// writer sends PartHeader before each part's bytes and MultipartClosing after the last one, so
// the body length is known in advance (the sum of those strings and the parts).

// ContentRange is the Content-Range value of closed range b of an object of size bytes.
func ContentRange(b ByteRange, size uint64) string {
	out := make([]byte, 0, 48)
	out = append(out, "bytes "...)
	out = strconv.AppendUint(out, b.Start, 10)
	out = append(out, '-')
	out = strconv.AppendUint(out, b.End, 10)
	out = append(out, '/')
	out = strconv.AppendUint(out, size, 10)
	return string(out)
}

// PartHeader is the delimiter and headers written before the bytes of part b; first tells
// whether b is the first part (which has no leading CRLF).
func PartHeader(boundary string, b ByteRange, size uint64, first bool) string {
	lead := "\r\n"
	if first {
		lead = ""
	}
	return lead + "--" + boundary + "\r\nContent-Type: application/octet-stream\r\nContent-Range: " +
		ContentRange(b, size) + "\r\n\r\n"
}

// MultipartClosing is the delimiter written after the last part.
func MultipartClosing(boundary string) string { return "\r\n--" + boundary + "--\r\n" }

// NewBoundary returns a random multipart boundary.
func NewBoundary() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
