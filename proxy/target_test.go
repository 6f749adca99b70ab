package proxy

import "testing"

func TestValidTarget(t *testing.T) {
	for target, want := range map[string]bool{
		"/":                             true,
		"/a/b?c=%zz&d=100%":             true, // queries are not unescaped by the proxy
		"/a%2Fb":                        true,
		"http://acme.example.com/x":     true,
		"HTTPS://acme.example.com:8443": true,
		"*":                             false, // only for OPTIONS
		"/a%zz":                         false,
		"/a%2":                          false,
		"/a#frag":                       false,
		"/a\x01":                        false,
		"http://acme.example.com#0/x":   false,
		"http://user@acme.example.com/": false,
		"http://acme.example.com:80x/":  false,
		"http:///x":                     false,
		"ftp://acme.example.com/":       false,
		"acme.example.com:443":          false, // CONNECT's authority-form
	} {
		if got := validTarget([]byte(target), false); got != want {
			t.Errorf("%q: %v, want %v", target, got, want)
		}
	}
	if !validTarget([]byte("*"), true) {
		t.Error("OPTIONS *: refused")
	}
}
