package routes

import "testing"

func TestNormalizeHost(t *testing.T) {
	cases := []struct{ in, want string }{
		{"acme.auth.example.com", "acme.auth.example.com"},
		{"ACME.Auth.Example.COM", "acme.auth.example.com"},
		{"acme.auth.example.com:8443", "acme.auth.example.com"},
		{"acme.auth.example.com.", "acme.auth.example.com"},
		{"acme.auth.example.com.:80", "acme.auth.example.com"},
		{"bücher.example", "xn--bcher-kva.example"},
		{"BÜCHER.example", "xn--bcher-kva.example"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"localhost", "localhost"},
		{"", ""},
		{"a..example.com", ""},
		{"-a.example.com", ""},
		{"a-.example.com", ""},
		{"a_b.example.com", ""},
		{"acme.example.com:http", ""},
		{"[::1]:80", ""},
		{"evil.com/x", ""},
		{"a b.example.com", ""},
	}
	for _, c := range cases {
		got, err := NormalizeHost([]byte(c.in), make([]byte, 0, 64))
		if c.want == "" {
			if err == nil {
				t.Errorf("%q: accepted as %q", c.in, got)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("%q: %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func BenchmarkNormalizeHost(b *testing.B) {
	host, buf := []byte("Acme.Auth.Example.com:443"), make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NormalizeHost(host, buf); err != nil {
			b.Fatal(err)
		}
	}
}
