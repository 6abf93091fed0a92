package hub

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// ServeResolve answers HEAD and GET /{ns}/{name}/resolve/{rev}/{path} (models) and
// /datasets/{ns}/{name}/resolve/{rev}/{path}. It reports false, writing nothing, for any other
// path (the caller answers 404).
//
// A Xet file is answered with the headers huggingface_hub uses to hand it to hf_xet
// (docs/hub.md): X-Xet-Hash, Link rel="xet-auth" (the read-token route at the resolved commit),
// X-Repo-Commit, ETag (the sha256, as the Hub's X-Linked-Etag for LFS files), X-Linked-Size and
// Content-Length; hf_xet then fetches its bytes from the CAS (through the edge). A plain GET (a
// client without hf_xet) gets the bytes from the origin, decoded from the xorbs. A regular
// file's GET streams its blob.
func (h *Service) ServeResolve(w http.ResponseWriter, r *http.Request) bool {
	escaped := strings.TrimPrefix(r.URL.EscapedPath(), "/")
	typ := Model
	if rest, ok := strings.CutPrefix(escaped, "datasets/"); ok {
		typ, escaped = Dataset, rest
	}
	if h.serveLFS(w, r, typ, escaped) {
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
	hd.Set("Accept-Ranges", "bytes")
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
		win, err := rangeOf(w, r, hd.Get("ETag"), e.Size)
		if err != nil {
			return err
		}
		return h.streamXet(ctx, w, repo, e, win)
	}
	hd.Set("ETag", `"`+e.OID+`"`)
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return nil
	}
	win, err := rangeOf(w, r, hd.Get("ETag"), e.Size)
	if err != nil {
		return err
	}
	return h.streamBlob(ctx, w, e, win)
}

// streamBlob writes the window win of a regular file's blob.
func (h *Service) streamBlob(ctx context.Context, w http.ResponseWriter, e Entry, win window) error {
	if e.Size == 0 {
		w.WriteHeader(http.StatusOK)
		return nil
	}
	n, err := h.objs.Stat(ctx, BlobKey(e.SHA256))
	if err != nil {
		w.Header().Del("Content-Length")
		return fmt.Errorf("blob of %q: %w", e.Path, err)
	}
	if n != e.Size {
		w.Header().Del("Content-Length")
		return fmt.Errorf("%w: blob of %q has %d bytes, want %d", ErrUnavailable, e.Path, n, e.Size)
	}
	rc, err := h.objs.GetRange(ctx, BlobKey(e.SHA256), win.start, win.n)
	if err != nil {
		w.Header().Del("Content-Length")
		return fmt.Errorf("blob of %q: %w", e.Path, err)
	}
	defer rc.Close()
	w.WriteHeader(win.status())
	_, err = io.Copy(w, rc)
	if err != nil {
		h.log.Warn("hub: blob stream cut", "path", e.Path, "err", err)
	}
	return nil
}

// streamXet writes the window win of a Xet file's bytes for a plain GET (a client without
// hf_xet): term by term, each term's stored byte range of its xorb read from the object store
// and its chunks decoded; the terms before the window are skipped, the first one in it is
// decoded from its start and its leading bytes dropped. The bytes were validated at upload;
// the total must come out at the window's length, else the answer is cut short (the client
// sees a short body against Content-Length).
func (h *Service) streamXet(ctx context.Context, w http.ResponseWriter, repo Repo, e Entry, win window) error {
	fh, err := hash.Parse(e.Xet)
	if err != nil || h.xetRecord == nil {
		w.Header().Del("Content-Length")
		return fmt.Errorf("%w: Xet file %s cannot be served here", errNotImplemented, e.Xet)
	}
	rec, err := h.xetRecord(ctx, fh, repo.Scope())
	if errors.Is(err, ErrEntryNotFound) && h.committed != nil {
		// The commit names it, so it is a garbage-collection root: readable even after the
		// scope's visibility was dropped through the CAS routes (docs/hub.md).
		rec, err = h.committed(ctx, fh)
	}
	if err != nil {
		w.Header().Del("Content-Length")
		if errors.Is(err, ErrEntryNotFound) {
			return fmt.Errorf("%w: Xet file of %q is no longer readable", ErrUnavailable, e.Path)
		}
		return err
	}
	if rec.Size != uint64(e.Size) {
		w.Header().Del("Content-Length")
		return fmt.Errorf("%w: Xet file %s has %d bytes, the commit says %d", ErrUnavailable, e.Xet, rec.Size, e.Size)
	}
	w.WriteHeader(win.status())
	if win.n == 0 {
		return nil
	}
	ww := &windowWriter{w: w, left: win.n}
	var pos int64 // offset in the file of the current term's first byte
	for _, t := range rec.Terms {
		tl := int64(t.RawBytes)
		if pos+tl <= win.start {
			pos += tl
			continue
		}
		ww.skip = max(0, win.start-pos)
		_, err := h.writeTerm(ctx, ww, t)
		pos += tl
		if errors.Is(err, errWindowFull) {
			return nil
		}
		if err != nil {
			h.log.Warn("hub: Xet file stream cut", "path", e.Path, "file", e.Xet, "sent", win.n-ww.left, "err", err)
			return nil
		}
	}
	h.log.Error("hub: Xet file stream has the wrong length", "file", e.Xet, "sent", win.n-ww.left, "want", win.n)
	return nil
}

func (h *Service) writeTerm(ctx context.Context, w io.Writer, t recon.Term) (uint64, error) {
	rc, err := h.objs.GetRange(ctx, objstore.XorbKey(t.Xorb), int64(t.ByteStart), int64(t.ByteEnd-t.ByteStart))
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	cr := xorb.NewChunkReader(bufio.NewReaderSize(rc, 256<<10))
	var n uint64
	for i := t.Start; i < t.End; i++ {
		raw, _, err := cr.Next()
		if err != nil {
			return n, fmt.Errorf("xorb %s chunk %d: %w", t.Xorb, i, err)
		}
		if _, err := w.Write(raw); err != nil {
			return n, err
		}
		n += uint64(len(raw))
	}
	if n != uint64(t.RawBytes) {
		return n, fmt.Errorf("xorb %s chunks %d-%d: %d bytes, term says %d", t.Xorb, t.Start, t.End, n, t.RawBytes)
	}
	return n, nil
}
