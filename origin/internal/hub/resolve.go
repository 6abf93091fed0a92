package hub

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// ServeResolve answers HEAD and GET /{ns}/{name}/resolve/{rev}/{path} (models) and
// /datasets/{ns}/{name}/resolve/{rev}/{path}. It reports false, writing nothing, for any other
// path (the caller answers 404).
//
// A Xet file is answered with the headers huggingface_hub uses to hand it to hf_xet
// (docs/hub.md): X-Xet-Hash, Link rel="xet-auth" (the read-token route at the resolved commit),
// X-Repo-Commit, ETag (the sha256, as the Hub's X-Linked-Etag for LFS files), X-Linked-Size and
// Content-Length; its bytes come from the CAS (through the edge), so a GET of a Xet file is
// refused with 501 and a hint. A regular file's GET streams its blob.
func (h *Service) ServeResolve(w http.ResponseWriter, r *http.Request) bool {
	escaped := strings.TrimPrefix(r.URL.EscapedPath(), "/")
	typ := Model
	if rest, ok := strings.CutPrefix(escaped, "datasets/"); ok {
		typ, escaped = Dataset, rest
	}
	if strings.HasSuffix(escaped, ".git/info/lfs/objects/batch") && r.Method == http.MethodPost {
		h.writeError(w, r, fmt.Errorf("%w: this server takes uploads through Xet only (huggingface_hub does so with hf_xet installed: pip install hf_xet)", errNotImplemented))
		return true
	}
	parts := strings.SplitN(escaped, "/", 5)
	if len(parts) < 5 || parts[2] != "resolve" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return false
	}
	if err := h.serveResolve(w, r, typ, parts); err != nil {
		h.writeError(w, r, err)
	}
	return true
}

func (h *Service) serveResolve(w http.ResponseWriter, r *http.Request, typ string, parts []string) error {
	var dec [5]string
	for i, p := range parts {
		s, err := url.PathUnescape(p)
		if err != nil {
			return fmt.Errorf("%w: bad escape in path", ErrInvalid)
		}
		dec[i] = s
	}
	id, rev, path := dec[0]+"/"+dec[1], dec[3], dec[4]
	ctx := r.Context()
	p, err := h.principal(ctx, r)
	if err != nil {
		return err
	}
	repo, err := h.visibleRepo(ctx, p, typ, id)
	if err != nil {
		return err
	}
	c, err := h.resolve(ctx, repo, rev)
	if err != nil {
		return err
	}
	w.Header().Set("X-Repo-Commit", c.ID)
	if err := CheckPath(path); err != nil {
		return err
	}
	e, ok := c.Lookup(path)
	if !ok {
		return fmt.Errorf("%w: %q at %q", ErrEntryNotFound, path, rev)
	}
	hd := w.Header()
	hd.Set("Accept-Ranges", "none")
	hd.Set("Content-Length", strconv.FormatInt(e.Size, 10))
	hd.Set("Content-Type", "application/octet-stream")
	if e.Xet != "" {
		hd.Set("ETag", `"`+e.SHA256+`"`)
		hd.Set("X-Linked-Etag", `"`+e.SHA256+`"`)
		hd.Set("X-Linked-Size", strconv.FormatInt(e.Size, 10))
		hd.Set("X-Xet-Hash", e.Xet)
		auth := fmt.Sprintf("%s/api/%s/%s/xet-read-token/%s", h.public, Plural(repo.Type), repo.ID, c.ID)
		hd.Set("Link", fmt.Sprintf("<%s>; rel=\"xet-auth\"", auth))
		hd.Set("X-Xet-Refresh-Route", auth)
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusOK)
			return nil
		}
		hd.Del("Content-Length")
		return fmt.Errorf("%w: %q is a Xet file: download it with hf_xet (huggingface_hub does so by itself when hf_xet is installed)", errNotImplemented, path)
	}
	hd.Set("ETag", `"`+e.OID+`"`)
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return nil
	}
	return h.streamBlob(ctx, w, e)
}

func (h *Service) streamBlob(ctx context.Context, w http.ResponseWriter, e Entry) error {
	if e.Size == 0 {
		w.WriteHeader(http.StatusOK)
		return nil
	}
	rc, n, err := h.objs.Get(ctx, BlobKey(e.SHA256))
	if err != nil {
		w.Header().Del("Content-Length")
		return fmt.Errorf("blob of %q: %w", e.Path, err)
	}
	defer rc.Close()
	if n != e.Size {
		w.Header().Del("Content-Length")
		return fmt.Errorf("%w: blob of %q has %d bytes, want %d", ErrUnavailable, e.Path, n, e.Size)
	}
	w.WriteHeader(http.StatusOK)
	_, err = io.Copy(w, rc)
	if err != nil {
		h.log.Warn("hub: blob stream cut", "path", e.Path, "err", err)
	}
	return nil
}
