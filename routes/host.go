package routes

import (
	"bytes"
	"errors"

	"golang.org/x/net/idna"
)

var errBadHost = errors.New("invalid host")

// NormalizeHost turns a Host header into the name routes are keyed by: lowercase,
// without port or trailing dot, internationalised names in their xn-- form. It writes
// into buf and returns it; the common case (already canonical) allocates nothing.
func NormalizeHost(host, buf []byte) ([]byte, error) {
	// Drop the port; a bracketed IPv6 literal is not a tenant hostname.
	if len(host) > 0 && host[0] == '[' {
		return nil, errBadHost
	}
	if i := bytes.LastIndexByte(host, ':'); i >= 0 {
		for _, c := range host[i+1:] {
			if c < '0' || c > '9' {
				return nil, errBadHost
			}
		}
		host = host[:i]
	}
	host = bytes.TrimSuffix(host, []byte("."))
	if len(host) == 0 || len(host) > 253 {
		return nil, errBadHost
	}
	out := append(buf[:0], host...)
	ascii := true
	for i, c := range out {
		switch {
		case c >= 'A' && c <= 'Z':
			out[i] = c + ('a' - 'A')
		case c >= 0x80:
			ascii = false
		}
	}
	if !ascii {
		name, err := idna.Lookup.ToASCII(string(host))
		if err != nil {
			return nil, errBadHost
		}
		out = append(buf[:0], name...)
	}
	if !validDNSName(out) {
		return nil, errBadHost
	}
	return out, nil
}

// validDNSName checks lowercase RFC 1123 labels of 1-63 characters.
func validDNSName(name []byte) bool {
	label := 0
	for i, c := range name {
		switch {
		case c == '.':
			if label == 0 || name[i-1] == '-' {
				return false
			}
			label = 0
			continue
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-':
			if label == 0 {
				return false
			}
		default:
			return false
		}
		label++
		if label > 63 {
			return false
		}
	}
	return label > 0 && name[len(name)-1] != '-'
}

// Normalize is NormalizeHost for a string, reporting whether the host is valid.
func Normalize(host string) (string, bool) {
	b, err := NormalizeHost([]byte(host), nil)
	return string(b), err == nil
}
