package httpapi

import (
	"net/http"
	"net/url"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/wire"
)

// handleSearch finds messages the caller may read:
// GET /api/search?q=&conv=&from=&before=&limit=&cursor=, answered as the
// results frame (hits, newest first, and next). Each parameter is given
// at most once; limit is at least 1 (a larger one is capped at the page
// size), before a time in RFC 3339; the query is parsed by the use case.
func handleSearch(c calls) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := searchRequest(r)
		if err != nil {
			c.writeError(w, c.app.RefuseSearch(app.HTTP, err), "search")
			return
		}
		ctx, cancel := c.ctx(r)
		defer cancel()
		page, err := c.app.Search(ctx, app.HTTP, caller(r), req)
		if err != nil {
			c.writeError(w, err, "search")
			return
		}
		encode(w, http.StatusOK, frameBody(wire.Results(page)))
	})
}

// searchRequest reads the query parameters of GET /api/search.
func searchRequest(r *http.Request) (parley.SearchRequest, error) {
	q := r.URL.Query()
	for _, name := range []string{"q", "conv", "from", "before", "cursor"} {
		if vs, ok := q[name]; ok && len(vs) != 1 {
			return parley.SearchRequest{}, parley.Errorf(parley.CodeInvalidArgument, "%s must be given once", name)
		}
	}
	if !has(q, "q") {
		return parley.SearchRequest{}, parley.Errorf(parley.CodeInvalidArgument, "q is required")
	}
	req := parley.SearchRequest{Query: q.Get("q"), Conv: q.Get("conv"), From: q.Get("from"), Cursor: q.Get("cursor")}
	limit, err := queryInt(r, "limit", 0)
	if err != nil {
		return req, err
	}
	if has(q, "limit") && limit < 1 {
		return req, parley.Errorf(parley.CodeInvalidArgument, "limit must be at least 1")
	}
	req.Limit = int(min(limit, parley.MaxSearchPage))
	req.Before, err = wire.SearchBefore(q.Get("before"))
	return req, err
}

func has(q url.Values, name string) bool {
	_, ok := q[name]
	return ok
}
