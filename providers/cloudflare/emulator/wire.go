package emulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// The v4 API's wire format: the envelope every answer comes in, its errors, and
// pagination.

// apiError is one entry of the envelope's errors, with the HTTP status to answer.
type apiError struct {
	status  int
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (a *apiError) Error() string { return fmt.Sprintf("%d: %s", a.Code, a.Message) }

func errorf(status, code int, format string, args ...any) *apiError {
	return &apiError{status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

type resultInfo struct {
	Page       int `json:"page"`
	PerPage    int `json:"per_page"`
	Count      int `json:"count"`
	TotalCount int `json:"total_count"`
	TotalPages int `json:"total_pages"`
}

type envelope struct {
	Success    bool        `json:"success"`
	Errors     []*apiError `json:"errors"`
	Messages   []any       `json:"messages"`
	Result     any         `json:"result"`
	ResultInfo *resultInfo `json:"result_info,omitempty"`
}

func writeEnvelope(w http.ResponseWriter, status int, result any, info *resultInfo, errs ...*apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(envelope{
		Success: len(errs) == 0, Errors: append([]*apiError{}, errs...), Messages: []any{},
		Result: result, ResultInfo: info,
	})
}

func writeError(w http.ResponseWriter, err *apiError) {
	writeEnvelope(w, err.status, nil, nil, err)
}
func page(r *http.Request, defaultPerPage, maxPerPage int) (int, int, *apiError) {
	q := r.URL.Query()
	p, perPage := 1, defaultPerPage
	if v := q.Get("page"); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n < 1 {
			return 0, 0, errorf(http.StatusBadRequest, 1004, "page must be a positive integer")
		}
		p = int(n)
	}
	if v := q.Get("per_page"); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n < 1 || int(n) > maxPerPage {
			return 0, 0, errorf(http.StatusBadRequest, 1004, "per_page must be between 1 and %d", maxPerPage)
		}
		perPage = int(n)
	}
	return p, perPage, nil
}

// paginate answers an out-of-range page with an empty result, as Cloudflare does.
func paginate[T any](items []T, p, perPage int) ([]T, *resultInfo) {
	start := min((p-1)*perPage, len(items))
	end := min(start+perPage, len(items))
	info := &resultInfo{Page: p, PerPage: perPage, Count: end - start, TotalCount: len(items),
		TotalPages: (len(items) + perPage - 1) / perPage}
	return append([]T{}, items[start:end]...), info
}
