package proxy

import (
	"bytes"
)

var schemeSep = []byte("://")

// validTarget checks a request-target at least as strictly as Go's net/http does, so
// that no backend reads a target the proxy let through differently: origin-form
// ("/path?q", but not "//host/...://..."), absolute-form (http or https, an authority of a host name and an
// optional port, no user information), or "*" for OPTIONS; no control character, no
// fragment; in the path, every '%' starts an escape of two hex digits. fasthttp itself
// accepts more.
func validTarget(uri []byte, options bool) bool {
	switch {
	case len(uri) == 0:
		return false
	case uri[0] == '/':
		// "//victim.example.com/x?u=https://y" is an origin-form path, but fasthttp
		// reads a target that starts with "//" and holds "://" anywhere as a
		// scheme-relative URL and takes its host from it, not from the Host header: a
		// request that a front edge let through for one tenant would reach another.
		if len(uri) > 1 && uri[1] == '/' && bytes.Contains(uri, schemeSep) {
			return false
		}
	case len(uri) == 1 && uri[0] == '*':
		return options
	case hasPrefixFold(uri, "http://"), hasPrefixFold(uri, "https://"):
		rest := uri[bytes.IndexByte(uri, ':')+3:]
		end := bytes.IndexAny(rest, "/?")
		if end < 0 {
			end = len(rest)
		}
		if !validAuthority(rest[:end]) {
			return false
		}
		uri = rest[end:]
	default:
		return false
	}
	inPath := true
	for i := 0; i < len(uri); i++ {
		switch c := uri[i]; {
		case c <= ' ' || c == 0x7f || c == '#':
			return false
		case c == '?':
			inPath = false
		case c == '%' && inPath:
			if i+2 >= len(uri) || !isHex(uri[i+1]) || !isHex(uri[i+2]) {
				return false
			}
		}
	}
	return true
}

// validAuthority: a host name of letters, digits, dots and hyphens, then an optional
// port.
func validAuthority(a []byte) bool {
	if i := bytes.LastIndexByte(a, ':'); i >= 0 {
		for _, c := range a[i+1:] {
			if c < '0' || c > '9' {
				return false
			}
		}
		a = a[:i]
	}
	if len(a) == 0 {
		return false
	}
	for _, c := range a {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && bytes.EqualFold(b[:len(prefix)], []byte(prefix))
}
