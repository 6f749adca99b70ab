package cloudflare

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// batchAnswer is what a batch answer says that the provider uses: whether it
// succeeded, and the records created. Cloudflare answers a batch with every record it
// touched in full; the SDK read the answer whole, then decoded it, so that each batch
// in flight held it twice and its records once more, where only the created records'
// ids (and what they are, to tell them apart) are needed.
type batchAnswer struct {
	success bool
	posts   []posted
}

// posted is a record the batch created.
type posted struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Type    string `json:"type"`
	Content string `json:"content"`
}

// readBatchAnswer reads a batch answer one element at a time.
func readBatchAnswer(answer io.Reader) (batchAnswer, error) {
	dec := json.NewDecoder(answer)
	var a batchAnswer
	err := members(dec, func(key string) error {
		// Keys match as encoding/json, which the SDK used, matches them: any case.
		switch {
		case strings.EqualFold(key, "success"):
			return dec.Decode(&a.success)
		case !strings.EqualFold(key, "result"):
			return skip(dec)
		}
		return members(dec, func(key string) error {
			if !strings.EqualFold(key, "posts") {
				return skip(dec)
			}
			a.posts = a.posts[:0] // a member given twice counts once, the last, as encoding/json reads it
			return elements(dec, func() error {
				var post posted
				if err := dec.Decode(&post); err != nil {
					return err
				}
				if post.ID == "" {
					return fmt.Errorf("post %d has no id", len(a.posts))
				}
				a.posts = append(a.posts, post)
				return nil
			})
		})
	})
	if err == nil {
		// Read to the end, so that the connection is used again; what follows the
		// answer is not read past a bound (the connection is dropped then).
		if _, err = io.CopyN(io.Discard, answer, 64<<10); err == io.EOF {
			err = nil
		}
	}
	return a, err
}

// members calls member for each key of the object that comes next, which must read
// the key's value; null is an object without members.
func members(dec *json.Decoder, member func(key string) error) error {
	return container(dec, '{', func() error {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := t.(string) // in an object, Token returns keys as strings
		return member(key)
	})
}

// elements calls element for each element of the array that comes next, which must
// read the element; null is an empty array.
func elements(dec *json.Decoder, element func() error) error {
	return container(dec, '[', element)
}

func container(dec *json.Decoder, open json.Delim, each func() error) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil
	}
	if t != open {
		return fmt.Errorf("%v where %v was expected", t, open)
	}
	for dec.More() {
		if err := each(); err != nil {
			return err
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// skip reads the value that comes next; an array or object is read an element at a
// time, so that a long one is never held whole.
func skip(dec *json.Decoder) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	open, ok := t.(json.Delim)
	if !ok {
		return nil // a scalar, read
	}
	for dec.More() {
		if open == '{' {
			if _, err := dec.Token(); err != nil {
				return err
			}
		}
		var ignored discard
		if err := dec.Decode(&ignored); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	return err
}

// discard takes any JSON value and keeps nothing of it.
type discard struct{}

func (*discard) UnmarshalJSON([]byte) error { return nil }
