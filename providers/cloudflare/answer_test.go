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

func TestReadBatchAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		want         []string
		success      bool
		fails        bool
	}{
		{"posts after other members", string(answer(3, 2)), []string{"posted000000", "posted000001", "posted000002"}, true, false},
		{"posts first, result last", `{"result":{"posts":[{"id":"a"},{"id":"b","meta":{"x":[1,[2,{"y":null}]]}}],"patches":[{"id":"p"}]},"success":true}`, []string{"a", "b"}, true, false},
		{"posts given twice: the last", `{"result":{"posts":[{"id":"a"}]},"result":{"posts":[{"id":"b"}],"posts":[{"id":"c"}]},"success":true}`, []string{"c"}, true, false},
		{"keys in another case", `{"Result":{"POSTS":[{"ID":"a"}]},"Success":true}`, []string{"a"}, true, false},
		{"no posts", `{"result":{"deletes":[{"id":"d"}]},"success":true}`, nil, true, false},
		{"posts null", `{"result":{"posts":null},"success":true}`, nil, true, false},
		{"result null", `{"result":null,"success":true}`, nil, true, false},
		{"success false", `{"success":false,"errors":[],"result":null}`, nil, false, false},
		{"no success", `{}`, nil, false, false},
		{"deep values skipped", `{"messages":` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + `,"result":{"posts":[{"id":"a"}]},"success":true}`, []string{"a"}, true, false},
		{"cut short", string(answer(3, 2))[:300], nil, false, true},
		{"cut inside the posts", `{"result":{"posts":[{"id":"a"},{"id":`, nil, false, true},
		{"a post without id", `{"result":{"posts":[{"name":"x"}]}}`, nil, false, true},
		{"posts not an array", `{"result":{"posts":{"id":"a"}}}`, nil, false, true},
		{"success not a boolean", `{"success":"yes"}`, nil, false, true},
		{"not an object", `[{"id":"a"}]`, nil, false, true},
		{"not JSON", `<html>bad gateway</html>`, nil, false, true},
		{"empty", ``, nil, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readBatchAnswer(strings.NewReader(tc.answer))
			if tc.fails {
				if err == nil {
					t.Fatalf("read %+v from a bad answer, want an error", got)
				}
				return
			}
			var ids []string
			for _, p := range got.posts {
				ids = append(ids, p.ID)
			}
			if err != nil || !slices.Equal(ids, tc.want) || got.success != tc.success {
				t.Errorf("readBatchAnswer = %v %v, %v; want %v %v", ids, got.success, err, tc.want, tc.success)
			}
		})
	}
}

// The ids of created records are taken by position only while the answer lists them
// as sent; in another order each is found by what it is, so that no id crosses to
// another tenant's record (whose later delete would remove the wrong one).
func TestCreatedRecordsGetTheirOwnIDs(t *testing.T) {
	sent := []batchRecord{
		{Name: "a.example.com", Type: "CNAME", Content: "edge-1.example.net"},
		{Name: "b.example.com", Type: "CNAME", Content: "edge-1.example.net"},
		{Name: "c.example.com", Type: "A", Content: "192.0.2.1"},
		{Name: "c.example.com", Type: "A", Content: "192.0.2.2"},
	}
	post := func(id string, r batchRecord) posted {
		return posted{ID: id, Name: r.Name, Type: r.Type, Content: r.Content}
	}
	for _, tc := range []struct {
		name string
		got  []posted
		want []string
	}{
		{"in order", []posted{post("1", sent[0]), post("2", sent[1]), post("3", sent[2]), post("4", sent[3])}, []string{"1", "2", "3", "4"}},
		{"reversed", []posted{post("4", sent[3]), post("3", sent[2]), post("2", sent[1]), post("1", sent[0])}, []string{"1", "2", "3", "4"}},
		{"two values of one set swapped", []posted{post("1", sent[0]), post("2", sent[1]), post("4", sent[3]), post("3", sent[2])}, []string{"1", "2", "3", "4"}},
		{"written back in another case, with a dot", []posted{{ID: "2", Name: "B.example.com.", Type: "cname", Content: "edge-1.example.net"},
			post("1", sent[0]), post("4", sent[3]), post("3", sent[2])}, []string{"1", "2", "3", "4"}},
	} {
		ids, err := postIDs(sent, tc.got)
		if err != nil || !slices.Equal(ids, tc.want) {
			t.Errorf("%s: %v %v, want %v", tc.name, ids, err, tc.want)
		}
	}
	for name, got := range map[string][]posted{
		"one missing":         {post("1", sent[0]), post("2", sent[1]), post("3", sent[2])},
		"another record":      {post("1", sent[0]), post("2", sent[1]), post("3", sent[2]), {ID: "9", Name: "d.example.com", Type: "A", Content: "192.0.2.9"}},
		"one given for three": {post("1", sent[0]), post("1", sent[0]), post("1", sent[0]), post("1", sent[0])},
	} {
		if ids, err := postIDs(sent, got); err == nil {
			t.Errorf("%s: ids %v, want an error", name, ids)
		}
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
		if a, err := readBatchAnswer(bytes.NewReader(raw)); err != nil || len(a.posts) != 500 {
			t.Fatalf("%d posts, %v", len(a.posts), err)
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
