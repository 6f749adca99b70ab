package cloudflare

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// answer is a batch answer as Cloudflare sends it: every record touched, in full.
func answer(posts, patches int) []byte {
	rec := func(kind string, i int) string {
		return fmt.Sprintf(`{"id":"%s%06d","name":"t%06d.example.com","type":"CNAME","content":"origin.example.net",`+
			`"proxiable":true,"proxied":true,"ttl":1,"settings":{"flatten_cname":false},"meta":{},`+
			`"comment":"tenantroute:default/t%06d","tags":[],"created_on":"2026-12-03T10:00:00Z","modified_on":"2026-12-03T10:00:00Z"}`, kind, i, i, i)
	}
	var b strings.Builder
	b.WriteString(`{"errors":[],"messages":[],"success":true,"result":{"deletes":[],"patches":[`)
	for i := range patches {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(rec("patched", i))
	}
	b.WriteString(`],"posts":[`)
	for i := range posts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(rec("posted", i))
	}
	b.WriteString(`],"puts":[]}}`)
	return []byte(b.String())
}

func TestPostIDs(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		want         []string
		fails        bool
	}{
		{"posts after other members", string(answer(3, 2)), []string{"posted000000", "posted000001", "posted000002"}, false},
		{"posts first, result last", `{"result":{"posts":[{"id":"a"},{"id":"b","meta":{"x":[1,[2,{"y":null}]]}}],"patches":[{"id":"p"}]},"success":true}`, []string{"a", "b"}, false},
		{"posts given twice: the last", `{"result":{"posts":[{"id":"a"}]},"result":{"posts":[{"id":"b"}],"posts":[{"id":"c"}]}}`, []string{"c"}, false},
		{"keys in another case", `{"Result":{"POSTS":[{"ID":"a"}]}}`, []string{"a"}, false},
		{"no posts", `{"result":{"deletes":[{"id":"d"}]},"success":true}`, nil, false},
		{"posts null", `{"result":{"posts":null}}`, nil, false},
		{"result null", `{"result":null,"success":true}`, nil, false},
		{"deep values skipped", `{"messages":` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + `,"result":{"posts":[{"id":"a"}]}}`, []string{"a"}, false},
		{"cut short", string(answer(3, 2))[:300], nil, true},
		{"cut inside the posts", `{"result":{"posts":[{"id":"a"},{"id":`, nil, true},
		{"a post without id", `{"result":{"posts":[{"name":"x"}]}}`, nil, true},
		{"posts not an array", `{"result":{"posts":{"id":"a"}}}`, nil, true},
		{"not an object", `[{"id":"a"}]`, nil, true},
		{"not JSON", `<html>bad gateway</html>`, nil, true},
		{"empty", ``, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := postIDs(strings.NewReader(tc.answer))
			if tc.fails {
				if err == nil {
					t.Fatalf("read %v from a bad answer, want an error", got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("postIDs = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// A batch of Cloudflare's largest size (3,500 records) is read holding one record at a
// time: what reading it allocates is a small part of the answer, where reading it
// whole, as the SDK did, allocated more than twice the answer.
func TestABatchAnswerIsNotHeldWhole(t *testing.T) {
	raw := answer(500, 3000)
	allocated := func(read func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		read()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	streamed := allocated(func() {
		if ids, err := postIDs(bytes.NewReader(raw)); err != nil || len(ids) != 500 {
			t.Fatalf("%d ids, %v", len(ids), err)
		}
	})
	whole := allocated(func() {
		var res struct {
			Result struct {
				Posts []record `json:"posts"`
			} `json:"result"`
		}
		buf := new(bytes.Buffer)
		_, _ = buf.ReadFrom(bytes.NewReader(raw))
		if err := json.NewDecoder(bytes.NewReader(buf.Bytes())).Decode(&res); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("answer %d KiB: streamed %d KiB, whole %d KiB", len(raw)>>10, streamed>>10, whole>>10)
	if streamed > uint64(len(raw))/4 {
		t.Errorf("reading a %d KiB answer allocated %d KiB, want under a quarter of it", len(raw)>>10, streamed>>10)
	}
}
