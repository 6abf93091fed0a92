package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The routes (docs/hub.md has the table). Paths are parsed from the escaped path, so that a
// revision quoted with %2F ("refs%2Fpr%2F1") stays one segment.

// MaxJSONBody bounds the small JSON bodies (create, delete, branch, tag, pre-upload).
const MaxJSONBody = 4 << 20

// MaxCommitBody bounds an NDJSON commit body on the wire.
const MaxCommitBody = 96 << 20

// IsTokenOp reports whether op (the 4th segment after /api/{type}/) is a Xet token route
// ("xet-read-token", "xet-write-token"), which the server answers itself (TokenAccess).
func IsTokenOp(op string) bool { return op == "xet-read-token" || op == "xet-write-token" }

// ServeAPI answers /api/... requests other than the Xet token routes. It writes every answer
// itself, errors in the Hub's shape (writeError).
func (h *Service) ServeAPI(w http.ResponseWriter, r *http.Request) {
	if err := h.serveAPI(w, r); err != nil {
		h.writeError(w, r, err)
	}
}

func (h *Service) serveAPI(w http.ResponseWriter, r *http.Request) error {
	segs, err := segments(strings.TrimPrefix(r.URL.EscapedPath(), "/api/"))
	if err != nil {
		return err
	}
	ctx := r.Context()
	p, err := h.principal(ctx, r)
	if err != nil {
		return err
	}
	switch {
	case r.Method == http.MethodPost && len(segs) == 2 && segs[0] == "repos" && segs[1] == "create":
		return h.apiCreate(w, r, p)
	case r.Method == http.MethodDelete && len(segs) == 2 && segs[0] == "repos" && segs[1] == "delete":
		return h.apiDelete(w, r, p)
	case r.Method == http.MethodGet && len(segs) == 1 && segs[0] == "whoami-v2":
		if p.User == "" {
			return fmt.Errorf("%w: whoami needs a user access token (hf_...)", ErrUnauthorized)
		}
		writeJSON(w, http.StatusOK, map[string]any{"type": "user", "id": p.User, "name": p.User, "fullname": p.User,
			"orgs": []any{}, "auth": map[string]any{"type": "access_token",
				"accessToken": map[string]any{"displayName": "xetcdn-" + p.User, "role": p.Role()}}})
		return nil
	case r.Method == http.MethodPost && len(segs) == 1 && segs[0] == "validate-yaml":
		// README metadata is not interpreted: every README is accepted as it is.
		io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, MaxJSONBody))
		writeJSON(w, http.StatusOK, map[string]any{"errors": []any{}, "warnings": []any{}})
		return nil
	}
	if len(segs) < 3 || TypeOfPlural(segs[0]) == "" {
		return fmt.Errorf("%w: no such API route", errNoRoute)
	}
	typ, id := TypeOfPlural(segs[0]), segs[1]+"/"+segs[2]
	rest := segs[3:]
	op, arg := "", ""
	if len(rest) > 0 {
		op, arg = rest[0], strings.Join(rest[1:], "/")
	}
	switch {
	case r.Method == http.MethodGet && op == "":
		return h.apiInfo(w, r, p, typ, id, "")
	case r.Method == http.MethodGet && op == "revision" && len(rest) == 2:
		return h.apiInfo(w, r, p, typ, id, rest[1])
	case r.Method == http.MethodGet && op == "tree" && len(rest) >= 2:
		return h.apiTree(w, r, p, typ, id, rest[1], strings.Join(rest[2:], "/"))
	case r.Method == http.MethodGet && op == "refs" && len(rest) == 1:
		return h.apiRefs(w, r, p, typ, id)
	case r.Method == http.MethodPost && op == "preupload" && len(rest) == 2:
		return h.apiPreupload(w, r, p, typ, id, rest[1])
	case r.Method == http.MethodPost && op == "commit" && len(rest) == 2:
		return h.apiCommit(w, r, p, typ, id, rest[1])
	case r.Method == http.MethodPost && op == "branch" && len(rest) == 2:
		var body struct {
			StartingPoint string `json:"startingPoint"`
		}
		if err := readJSON(w, r, &body); err != nil {
			return err
		}
		if err := h.AddRef(r.Context(), p, typ, id, "branch", arg, body.StartingPoint); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{})
		return nil
	case r.Method == http.MethodPost && op == "tag" && len(rest) == 2:
		var body struct {
			Tag     string `json:"tag"`
			Message string `json:"message"`
		}
		if err := readJSON(w, r, &body); err != nil {
			return err
		}
		if err := h.AddRef(r.Context(), p, typ, id, "tag", body.Tag, arg); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{})
		return nil
	}
	if handled, err := h.serveHistory(w, r, p, typ, id, rest); handled {
		return err
	}
	return fmt.Errorf("%w: no such API route", errNoRoute)
}

var (
	errNoRoute        = errors.New("not found")
	errNotImplemented = errors.New("not implemented")
)

// segments splits an escaped path into unescaped segments; an undecodable one is ErrInvalid.
func segments(escaped string) ([]string, error) {
	escaped = strings.TrimSuffix(escaped, "/")
	if escaped == "" {
		return nil, nil
	}
	parts := strings.Split(escaped, "/")
	for i, p := range parts {
		s, err := url.PathUnescape(p)
		if err != nil {
			return nil, fmt.Errorf("%w: bad escape in path", ErrInvalid)
		}
		parts[i] = s
	}
	return parts, nil
}

type repoBody struct {
	Name         string  `json:"name"`
	Organization *string `json:"organization"`
	Type         *string `json:"type"`
	Visibility   string  `json:"visibility"`
	Private      *bool   `json:"private"`
}

func (b repoBody) target(p *Principal) (typ, id string, err error) {
	typ = Model
	if b.Type != nil {
		typ = *b.Type
	}
	if Plural(typ) == "" {
		return "", "", fmt.Errorf("%w: repository type %q (model or dataset)", ErrInvalid, typ)
	}
	ns := p.User
	if b.Organization != nil && *b.Organization != "" {
		ns = *b.Organization
	}
	if ns == "" {
		return "", "", fmt.Errorf("%w: the repository needs a namespace (organization/name)", ErrInvalid)
	}
	id = ns + "/" + b.Name
	return typ, id, CheckRepoID(id)
}

func (h *Service) repoURL(r Repo) string {
	if r.Type == Model {
		return h.public + "/" + r.ID
	}
	return h.public + "/" + Plural(r.Type) + "/" + r.ID
}

func (h *Service) apiCreate(w http.ResponseWriter, r *http.Request, p *Principal) error {
	var b repoBody
	if err := readJSON(w, r, &b); err != nil {
		return err
	}
	typ, id, err := b.target(p)
	if err != nil {
		return err
	}
	private := b.Visibility == "private" || (b.Private != nil && *b.Private)
	if b.Visibility != "" && b.Visibility != "private" && b.Visibility != "public" {
		return fmt.Errorf("%w: visibility %q (public or private)", ErrInvalid, b.Visibility)
	}
	repo, err := h.CreateRepo(r.Context(), p, typ, id, private)
	if errors.Is(err, ErrExists) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Error-Message", err.Error())
		w.WriteHeader(http.StatusConflict)
		json.NewEncoder(w).Encode(map[string]any{"error": err.Error(), "url": h.repoURL(repo)})
		return nil
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"url": h.repoURL(repo), "name": repo.ID, "id": repo.ID})
	return nil
}

func (h *Service) apiDelete(w http.ResponseWriter, r *http.Request, p *Principal) error {
	var b repoBody
	if err := readJSON(w, r, &b); err != nil {
		return err
	}
	typ, id, err := b.target(p)
	if err != nil {
		return err
	}
	if err := h.DeleteRepo(r.Context(), p, typ, id); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{})
	return nil
}

type lfsJSON struct {
	OID         string `json:"oid"`
	Size        int64  `json:"size"`
	PointerSize int    `json:"pointerSize"`
}

func (h *Service) apiInfo(w http.ResponseWriter, r *http.Request, p *Principal, typ, id, rev string) error {
	repo, err := h.visibleRepo(r.Context(), p, typ, id)
	if err != nil {
		return err
	}
	c, err := h.resolve(r.Context(), repo, rev)
	if err != nil {
		return err
	}
	blobs := r.URL.Query().Get("blobs") == "true" || r.URL.Query().Get("blobs") == "1"
	siblings := make([]map[string]any, 0, len(c.Tree))
	for _, e := range c.Tree {
		s := map[string]any{"rfilename": e.Path}
		if blobs {
			s["size"] = e.Size
			s["blobId"] = e.OID
			if e.Xet != "" {
				s["lfs"] = map[string]any{"size": e.Size, "sha256": e.SHA256, "pointerSize": PointerSize(e.SHA256, e.Size)}
			}
		}
		siblings = append(siblings, s)
	}
	ns, _, _ := strings.Cut(repo.ID, "/")
	writeJSON(w, http.StatusOK, map[string]any{
		"_id": repo.Scope(), "id": repo.ID, "author": ns, "sha": c.ID, "private": repo.Private,
		"gated": false, "disabled": false, "downloads": 0, "likes": 0, "tags": []string{},
		"lastModified": c.Time().Format(time.RFC3339), "createdAt": repo.Created.Format(time.RFC3339),
		"siblings": siblings,
	})
	return nil
}

func (h *Service) apiRefs(w http.ResponseWriter, r *http.Request, p *Principal, typ, id string) error {
	repo, err := h.visibleRepo(r.Context(), p, typ, id)
	if err != nil {
		return err
	}
	out := map[string]any{"converts": []any{}}
	for _, kind := range []string{"branch", "tag"} {
		refs, err := h.store.Refs(r.Context(), repo.Scope(), kind)
		if err != nil {
			return err
		}
		names := make([]string, 0, len(refs))
		for n := range refs {
			names = append(names, n)
		}
		sort.Strings(names)
		list := make([]map[string]any, 0, len(names))
		for _, n := range names {
			list = append(list, map[string]any{"name": n, "ref": "refs/" + kind + "s/" + n, "targetCommit": refs[n]})
		}
		out[map[string]string{"branch": "branches", "tag": "tags"}[kind]] = list
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// apiTree lists the tree at rev under dir: its direct children, or with recursive=true every
// file and folder below it; pages of PageSize entries, the next page in a Link rel="next"
// header with a cursor (the index of the next entry).
func (h *Service) apiTree(w http.ResponseWriter, r *http.Request, p *Principal, typ, id, rev, dir string) error {
	repo, err := h.visibleRepo(r.Context(), p, typ, id)
	if err != nil {
		return err
	}
	c, err := h.resolve(r.Context(), repo, rev)
	if err != nil {
		return err
	}
	if dir != "" {
		if err := CheckPath(dir); err != nil {
			return err
		}
	}
	q := r.URL.Query()
	recursive := q.Get("recursive") == "true" || q.Get("recursive") == "1" || q.Get("recursive") == "True"
	cursor := 0
	if s := q.Get("cursor"); s != "" {
		if cursor, err = strconv.Atoi(s); err != nil || cursor < 0 {
			return fmt.Errorf("%w: cursor %q", ErrInvalid, s)
		}
	}
	items := listTree(c, dir, recursive)
	if items == nil {
		return fmt.Errorf("%w: %q at %q", ErrEntryNotFound, dir, rev)
	}
	if cursor > len(items) {
		return fmt.Errorf("%w: cursor %d past the end", ErrInvalid, cursor)
	}
	end := min(cursor+PageSize, len(items))
	if end < len(items) {
		next := *r.URL
		nq := next.Query()
		nq.Set("cursor", strconv.Itoa(end))
		next.RawQuery = nq.Encode()
		w.Header().Set("Link", fmt.Sprintf("<%s%s>; rel=\"next\"", h.public, next.RequestURI()))
	}
	writeJSON(w, http.StatusOK, items[cursor:end])
	return nil
}

// listTree is the listing of dir ("" = root) in c; nil when dir is not a folder of c.
func listTree(c *Commit, dir string, recursive bool) []map[string]any {
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	out := []map[string]any{}
	seen := map[string]bool{}
	found := dir == ""
	for _, e := range c.Tree {
		if !strings.HasPrefix(e.Path, prefix) {
			continue
		}
		found = true
		rest := e.Path[len(prefix):]
		// Folders on the way to the file.
		parts := strings.Split(rest, "/")
		for i := 1; i < len(parts); i++ {
			if !recursive && i > 1 {
				break
			}
			folder := prefix + strings.Join(parts[:i], "/")
			if !seen[folder] {
				seen[folder] = true
				out = append(out, map[string]any{"type": "directory", "path": folder, "oid": GitBlobID([]byte("tree " + c.ID + " " + folder)), "size": 0})
			}
		}
		if !recursive && len(parts) > 1 {
			continue
		}
		f := map[string]any{"type": "file", "path": e.Path, "oid": e.OID, "size": e.Size}
		if e.Xet != "" {
			f["lfs"] = lfsJSON{OID: e.SHA256, Size: e.Size, PointerSize: PointerSize(e.SHA256, e.Size)}
			f["xetHash"] = e.Xet
		}
		out = append(out, f)
	}
	if !found {
		return nil
	}
	return out
}

type preuploadFile struct {
	Path   string `json:"path"`
	Sample string `json:"sample"`
	Size   int64  `json:"size"`
}

func (h *Service) apiPreupload(w http.ResponseWriter, r *http.Request, p *Principal, typ, id, rev string) error {
	repo, err := h.writableRepo(r.Context(), p, typ, id)
	if err != nil {
		return err
	}
	var body struct {
		Files []preuploadFile `json:"files"`
	}
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	if len(body.Files) > MaxOperations {
		return fmt.Errorf("%w: more than %d files", ErrTooLarge, MaxOperations)
	}
	c, err := h.resolve(r.Context(), repo, rev)
	if errors.Is(err, ErrRevisionNotFound) {
		c = &Commit{} // a branch created by the commit's caller later: nothing to compare
	} else if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(body.Files))
	for _, f := range body.Files {
		if err := CheckPath(f.Path); err != nil {
			return err
		}
		if f.Size < 0 {
			return fmt.Errorf("%w: %q: negative size", ErrInvalid, f.Path)
		}
		mode := "regular"
		if f.Size > h.inlineMax {
			mode = "lfs"
		}
		a := map[string]any{"path": f.Path, "uploadMode": mode, "shouldIgnore": false}
		if e, ok := c.Lookup(f.Path); ok {
			a["oid"] = e.RemoteOID()
		}
		out = append(out, a)
	}
	writeJSON(w, http.StatusOK, map[string]any{"files": out, "commitOid": c.ID})
	return nil
}

func (h *Service) apiCommit(w http.ResponseWriter, r *http.Request, p *Principal, typ, id, rev string) error {
	if q := r.URL.Query(); q.Get("create_pr") == "1" {
		return fmt.Errorf("%w: pull requests are not supported", ErrInvalid)
	}
	res, err := h.Commit(r.Context(), p, typ, id, rev, http.MaxBytesReader(w, r.Body, MaxCommitBody))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"success": true, "commitOid": res.Commit.ID, "commitUrl": h.repoURL(res.Repo) + "/commit/" + res.Commit.ID,
		"pullRequestUrl": nil,
	})
	return nil
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: body longer than %d bytes", ErrTooLarge, mbe.Limit)
		}
		return fmt.Errorf("%w: reading the body: %v", ErrInvalid, err)
	}
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: the body is not the JSON expected: %v", ErrInvalid, err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeError answers err in the Hub's shape: status, X-Error-Code (RepoNotFound,
// RevisionNotFound, EntryNotFound: huggingface_hub raises the matching exception) and
// X-Error-Message headers, and {"error": message}. A dependency failure is 503; an error
// that matches nothing is logged and answered 500 without detail.
func (h *Service) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code, msg := http.StatusInternalServerError, "", "internal error"
	switch {
	case errors.Is(err, ErrRepoNotFound):
		status, code, msg = http.StatusNotFound, "RepoNotFound", "Repository not found"
	case errors.Is(err, ErrRevisionNotFound):
		status, code, msg = http.StatusNotFound, "RevisionNotFound", err.Error()
	case errors.Is(err, ErrEntryNotFound):
		status, code, msg = http.StatusNotFound, "EntryNotFound", err.Error()
	case errors.Is(err, errNoRoute):
		status, msg = http.StatusNotFound, "Not Found"
	case errors.Is(err, errRangeNotSatisfiable):
		status, msg = http.StatusRequestedRangeNotSatisfiable, err.Error()
	case errors.Is(err, errNotImplemented):
		status, msg = http.StatusNotImplemented, err.Error()
	case errors.Is(err, ErrUnauthorized):
		status, msg = http.StatusUnauthorized, "Invalid credentials in Authorization header"
		if !strings.Contains(err.Error(), "Authorization") && strings.HasPrefix(err.Error(), ErrUnauthorized.Error()+":") {
			msg = err.Error()
		}
	case errors.Is(err, ErrForbidden):
		status, msg = http.StatusForbidden, err.Error()
	case errors.Is(err, ErrExists):
		status, msg = http.StatusConflict, err.Error()
	case errors.Is(err, ErrConflict):
		status, msg = http.StatusPreconditionFailed, err.Error()
	case errors.Is(err, ErrTooLarge):
		status, msg = http.StatusRequestEntityTooLarge, err.Error()
	case errors.Is(err, ErrInvalid):
		status, msg = http.StatusBadRequest, err.Error()
	case errors.Is(err, ErrUnavailable) || (h.unavailable != nil && h.unavailable(err)):
		status, msg = http.StatusServiceUnavailable, "the hub's storage is unavailable; retry later"
		h.log.Warn("hub: dependency unavailable", "path", r.URL.Path, "err", err)
	default:
		h.log.Error("hub: internal error", "path", r.URL.Path, "err", err)
	}
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", headerSafe(msg))
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, map[string]string{"error": msg})
}

func headerSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c == 0x7f {
			b[i] = ' '
		}
	}
	if len(b) > 512 {
		b = b[:512]
	}
	return string(b)
}
