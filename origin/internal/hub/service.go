package hub

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Objects is the part of the object store the hub uses: regular files' content, and xorb
// ranges for a plain GET of a Xet file.
type Objects interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	Get(ctx context.Context, key string) (io.ReadCloser, int64, error)
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (int64, error)
}

// Defaults.
const (
	DefaultInlineMax = 1 << 20 // regular files up to 1 MiB, larger ones through Xet
	// MaxInlineTotal bounds the inline content of one commit (decoded), held in memory while
	// the commit is checked.
	MaxInlineTotal = 64 << 20
	// MaxOperations bounds the operations of one commit.
	MaxOperations = 100_000
	// PageSize is the tree listing's page length.
	PageSize = 1000
)

// Options configure a Service. Store and Objects are required.
type Options struct {
	Store   *Store
	Objects Objects
	// PublicURL is the origin's base URL (repository URLs, the xet-auth Link).
	PublicURL string
	// InlineMax: files up to this size are committed inline as regular files; larger ones must
	// be uploaded through Xet (pre-upload answers "lfs"). 0 = DefaultInlineMax.
	InlineMax int64
	// VerifyCAS verifies a bearer token that is not an hf_ token (the origin's CAS JWTs); nil =
	// only hf_ tokens authenticate.
	VerifyCAS func(*http.Request) (*auth.Claims, error)
	// XetRecord returns the record of a Xet file registered and visible in scope (index.File);
	// an error wrapping ErrEntryNotFound means it is not (a commit naming it is refused); any
	// other error is passed on.
	XetRecord func(ctx context.Context, file hash.Hash, scope string) (*recon.FileRecord, error)
	// CommittedRecord returns the record of a Xet file a commit names whether or not a scope
	// still sees it (a commit is a garbage-collection root, Roots, so its files' records and
	// xorbs stay): a plain GET of a committed file after its scope's visibility was dropped
	// through the CAS lifecycle routes. nil = XetRecord only.
	CommittedRecord func(ctx context.Context, file hash.Hash) (*recon.FileRecord, error)
	// DropScope drops the visibility of every file of a deleted repository's scope (the CAS
	// lifecycle's scope delete, with its event for the edges); nothing visible is no error.
	// nil = a deleted repository's scope keeps its visibility.
	DropScope func(ctx context.Context, scope string) error
	// Unavailable recognises the dependencies' "unavailable" errors (index, object store),
	// answered 503; nil = none.
	Unavailable func(error) bool
	Log         *slog.Logger
	Now         func() time.Time
}

// Service implements the hub's operations and HTTP API. Safe for concurrent use.
type Service struct {
	store       *Store
	objs        Objects
	public      string
	inlineMax   int64
	verifyCAS   func(*http.Request) (*auth.Claims, error)
	xetRecord   func(ctx context.Context, file hash.Hash, scope string) (*recon.FileRecord, error)
	committed   func(ctx context.Context, file hash.Hash) (*recon.FileRecord, error)
	dropScope   func(ctx context.Context, scope string) error
	unavailable func(error) bool
	log         *slog.Logger
	now         func() time.Time
	mintCAS     func(scope string, ttl time.Duration) (string, error) // lfs.go
}

// New builds a Service.
func New(o Options) *Service {
	if o.InlineMax <= 0 {
		o.InlineMax = DefaultInlineMax
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Service{store: o.Store, objs: o.Objects, public: strings.TrimRight(o.PublicURL, "/"), inlineMax: o.InlineMax,
		verifyCAS: o.VerifyCAS, xetRecord: o.XetRecord, committed: o.CommittedRecord, dropScope: o.DropScope, unavailable: o.Unavailable, log: o.Log, now: o.Now}
}

// Registered is ingest's hook after a shard registration (ingest.Options.Registered): it maps
// each file's sha256 to its Xet hash in scope, so a commit can name the file by sha256 as
// huggingface_hub does. Files without a sha256 in the shard are skipped.
func (h *Service) Registered(ctx context.Context, scope string, files []*recon.FileRecord) error {
	var m []LFSFile
	for _, f := range files {
		if f.SHA256 != nil {
			m = append(m, LFSFile{SHA256: f.SHA256.String(), File: f.Hash.String(), Size: int64(f.Size)})
		}
	}
	if err := h.store.PutLFS(ctx, scope, m, h.now()); err != nil {
		return fmt.Errorf("hub: record the sha256 of %d files: %w", len(m), err)
	}
	return nil
}

// visibleRepo returns the repository if p may read it; a private repository p may not read is
// ErrRepoNotFound, exactly as a missing one (nothing is revealed).
func (h *Service) visibleRepo(ctx context.Context, p *Principal, typ, id string) (Repo, error) {
	if err := CheckRepoID(id); err != nil {
		return Repo{}, err
	}
	r, err := h.store.Repo(ctx, typ, id)
	if err != nil {
		return Repo{}, err
	}
	if r.Private && !p.Can(r.Scope(), false) {
		return Repo{}, ErrRepoNotFound
	}
	return r, nil
}

// writableRepo is visibleRepo that also requires write access (403 when visible but read-only).
func (h *Service) writableRepo(ctx context.Context, p *Principal, typ, id string) (Repo, error) {
	r, err := h.visibleRepo(ctx, p, typ, id)
	if err != nil {
		return Repo{}, err
	}
	if !p.Can(r.Scope(), true) {
		if p.User == "" && len(p.Grants) == 0 {
			return Repo{}, fmt.Errorf("%w: a token with write access is needed", ErrUnauthorized)
		}
		return Repo{}, fmt.Errorf("%w: the token presented cannot write %s", ErrForbidden, r.Scope())
	}
	return r, nil
}

// resolve turns a revision (branch, tag or commit id of the repository) into its commit.
func (h *Service) resolve(ctx context.Context, r Repo, rev string) (*Commit, error) {
	if rev == "" {
		rev = "main"
	}
	id, err := h.store.Ref(ctx, r.Scope(), "branch", rev)
	if errors.Is(err, ErrRevisionNotFound) {
		id, err = h.store.Ref(ctx, r.Scope(), "tag", rev)
	}
	if errors.Is(err, ErrRevisionNotFound) && IsCommitID(rev) {
		id, err = rev, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %q", err, rev)
	}
	c, err := h.store.Commit(ctx, r.Scope(), id)
	if err != nil {
		return nil, fmt.Errorf("%w: %q", err, rev)
	}
	return c, nil
}

// newCommit fills in the id of a commit built from its fields.
func newCommit(c *Commit) *Commit {
	slices.SortFunc(c.Tree, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	body, _ := json.Marshal(c)
	c.ID = computeID(body)
	return c
}

// CreateRepo creates a repository with an empty first commit on "main".
func (h *Service) CreateRepo(ctx context.Context, p *Principal, typ, id string, private bool) (Repo, error) {
	if Plural(typ) == "" {
		return Repo{}, fmt.Errorf("%w: repository type %q (model or dataset)", ErrInvalid, typ)
	}
	if err := CheckRepoID(id); err != nil {
		return Repo{}, err
	}
	r := Repo{Type: typ, ID: id, Private: private, Created: h.now().UTC().Truncate(time.Second)}
	if !p.Can(r.Scope(), true) {
		if existing, err := h.visibleRepo(ctx, p, typ, id); err == nil {
			return existing, fmt.Errorf("%w: you cannot create %s", ErrForbidden, r.Scope())
		}
		if p.User == "" && len(p.Grants) == 0 {
			return Repo{}, fmt.Errorf("%w: a token with write access is needed", ErrUnauthorized)
		}
		return Repo{}, fmt.Errorf("%w: the token presented cannot create %s", ErrForbidden, r.Scope())
	}
	first := newCommit(&Commit{Message: "initial commit", Author: p.User, At: r.Created.Unix(), Tree: []Entry{}})
	if err := h.store.CreateRepo(ctx, r, first); err != nil {
		if errors.Is(err, ErrExists) {
			return r, fmt.Errorf("%w: you already created this %s repo", ErrExists, typ)
		}
		return Repo{}, err
	}
	return r, nil
}

// DeleteRepo deletes a repository (write access needed): first the visibility of every file of
// its scope (DropScope: the CAS lifecycle's scope delete, so edges drop their caches), then
// its refs, commits and uploads, so its files stop being garbage-collection roots (docs/hub.md,
// "Garbage collection"). A failure between the two steps leaves the repository in place and a
// retry finishes the job.
func (h *Service) DeleteRepo(ctx context.Context, p *Principal, typ, id string) error {
	r, err := h.writableRepo(ctx, p, typ, id)
	if err != nil {
		return err
	}
	if h.dropScope != nil {
		if err := h.dropScope(ctx, r.Scope()); err != nil {
			return fmt.Errorf("delete the files of %s: %w", r.Scope(), err)
		}
	}
	return h.store.DeleteRepo(ctx, r.Scope())
}

// AddRef creates a branch (kind "branch") or tag at revision from.
func (h *Service) AddRef(ctx context.Context, p *Principal, typ, id, kind, name, from string) error {
	r, err := h.writableRepo(ctx, p, typ, id)
	if err != nil {
		return err
	}
	if err := CheckRefName(name); err != nil {
		return err
	}
	c, err := h.resolve(ctx, r, from)
	if err != nil {
		return err
	}
	if err := h.store.AddRef(ctx, r.Scope(), kind, name, c.ID); err != nil {
		if errors.Is(err, ErrExists) {
			return fmt.Errorf("%w: %s %q", ErrExists, kind, name)
		}
		return err
	}
	return nil
}

// commitLine is one NDJSON line of a commit body.
type commitLine struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

type commitHeader struct {
	Summary      string  `json:"summary"`
	Description  string  `json:"description"`
	ParentCommit *string `json:"parentCommit"`
}

type commitFile struct {
	Path     string `json:"path"`
	Content  string `json:"content"`
	Encoding string `json:"encoding"`
}

type commitLFS struct {
	Path string `json:"path"`
	Algo string `json:"algo"`
	OID  string `json:"oid"`
	Size *int64 `json:"size"`
}

type commitDelete struct {
	Path string `json:"path"`
}

// op is one checked operation of a commit.
type op struct {
	kind    string // "file", "lfsFile", "deletedFile", "deletedFolder"
	path    string
	content []byte // file
	sha     string // lfsFile
	size    *int64 // lfsFile
}

// parseCommit reads an NDJSON commit body: a header line first, then operations. Everything
// is checked before anything is stored.
func (h *Service) parseCommit(body io.Reader) (*commitHeader, []op, error) {
	br := bufio.NewReaderSize(body, 64<<10)
	maxLine := int(h.inlineMax)*4/3 + 64<<10
	var hdr *commitHeader
	var ops []op
	var inline int64
	for n := 0; ; n++ {
		line, err := readLine(br, maxLine)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l commitLine
		if err := json.Unmarshal(line, &l); err != nil || l.Key == "" {
			return nil, nil, fmt.Errorf("%w: line %d of the commit is not a JSON object with a \"key\" (the body must be NDJSON)", ErrInvalid, n+1)
		}
		if hdr == nil && l.Key != "header" {
			return nil, nil, fmt.Errorf("%w: the first line of a commit must be its header", ErrInvalid)
		}
		strict := func(v any) error {
			d := json.NewDecoder(bytes.NewReader(l.Value))
			if err := d.Decode(v); err != nil {
				return fmt.Errorf("%w: line %d (%s): %v", ErrInvalid, n+1, l.Key, err)
			}
			return nil
		}
		switch l.Key {
		case "header":
			if hdr != nil {
				return nil, nil, fmt.Errorf("%w: a commit has one header", ErrInvalid)
			}
			hdr = &commitHeader{}
			if err := strict(hdr); err != nil {
				return nil, nil, err
			}
			if strings.TrimSpace(hdr.Summary) == "" {
				hdr.Summary = "Upload files"
			}
			if len(hdr.Summary)+len(hdr.Description) > 64<<10 {
				return nil, nil, fmt.Errorf("%w: commit message longer than 64 KiB", ErrInvalid)
			}
			continue
		case "file":
			var f commitFile
			if err := strict(&f); err != nil {
				return nil, nil, err
			}
			var content []byte
			switch f.Encoding {
			case "base64":
				content, err = base64.StdEncoding.DecodeString(f.Content)
				if err != nil {
					return nil, nil, fmt.Errorf("%w: %q: content is not base64", ErrInvalid, f.Path)
				}
			case "utf-8", "":
				content = []byte(f.Content)
			default:
				return nil, nil, fmt.Errorf("%w: %q: encoding %q", ErrInvalid, f.Path, f.Encoding)
			}
			if int64(len(content)) > h.inlineMax {
				return nil, nil, fmt.Errorf("%w: %q: inline files are limited to %d bytes; upload larger files through Xet (pre-upload answers \"lfs\")", ErrTooLarge, f.Path, h.inlineMax)
			}
			if inline += int64(len(content)); inline > MaxInlineTotal {
				return nil, nil, fmt.Errorf("%w: more than %d bytes of inline files in one commit", ErrTooLarge, MaxInlineTotal)
			}
			ops = append(ops, op{kind: l.Key, path: f.Path, content: content})
		case "lfsFile":
			var f commitLFS
			if err := strict(&f); err != nil {
				return nil, nil, err
			}
			if f.Algo != "" && f.Algo != "sha256" {
				return nil, nil, fmt.Errorf("%w: %q: algo %q (sha256 only)", ErrInvalid, f.Path, f.Algo)
			}
			if b, err := hex.DecodeString(f.OID); err != nil || len(b) != 32 || strings.ToLower(f.OID) != f.OID {
				return nil, nil, fmt.Errorf("%w: %q: oid %q is not a lower-case sha256", ErrInvalid, f.Path, f.OID)
			}
			ops = append(ops, op{kind: l.Key, path: f.Path, sha: f.OID, size: f.Size})
		case "deletedFile", "deletedFolder":
			var d commitDelete
			if err := strict(&d); err != nil {
				return nil, nil, err
			}
			ops = append(ops, op{kind: l.Key, path: strings.TrimSuffix(d.Path, "/")})
		default:
			return nil, nil, fmt.Errorf("%w: line %d: unknown operation %q", ErrInvalid, n+1, l.Key)
		}
		if err := CheckPath(ops[len(ops)-1].path); err != nil {
			return nil, nil, err
		}
		if len(ops) > MaxOperations {
			return nil, nil, fmt.Errorf("%w: more than %d operations in one commit", ErrTooLarge, MaxOperations)
		}
	}
	if hdr == nil {
		return nil, nil, fmt.Errorf("%w: empty commit body (NDJSON with a header line expected)", ErrInvalid)
	}
	return hdr, ops, nil
}

// readLine reads one line of at most max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return nil, fmt.Errorf("%w: a commit line is longer than %d bytes", ErrTooLarge, max)
		}
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(line) > 0:
			return line, nil
		case err == io.EOF:
			return nil, io.EOF
		default:
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, fmt.Errorf("%w: commit body longer than %d bytes", ErrTooLarge, mbe.Limit)
			}
			return nil, fmt.Errorf("%w: reading the commit: %v", ErrInvalid, err)
		}
	}
}

// CommitResult is what a commit returns.
type CommitResult struct {
	Repo   Repo
	Commit *Commit
}

// Commit applies an NDJSON commit body to branch rev: checks everything, stores the inline
// files, then moves the branch from its head (or the header's parentCommit, which must be the
// head: ErrConflict otherwise) to the new commit in one transaction.
func (h *Service) Commit(ctx context.Context, p *Principal, typ, id, rev string, body io.Reader) (*CommitResult, error) {
	r, err := h.writableRepo(ctx, p, typ, id)
	if err != nil {
		return nil, err
	}
	if rev == "" {
		rev = "main"
	}
	headID, err := h.store.Ref(ctx, r.Scope(), "branch", rev)
	if err != nil {
		return nil, fmt.Errorf("%w: branch %q (commits go to branches)", err, rev)
	}
	hdr, ops, err := h.parseCommit(body)
	if err != nil {
		return nil, err
	}
	if hdr.ParentCommit != nil && *hdr.ParentCommit != headID {
		return nil, fmt.Errorf("%w: parent commit %q is not the head of %q", ErrConflict, *hdr.ParentCommit, rev)
	}
	head, err := h.store.Commit(ctx, r.Scope(), headID)
	if err != nil {
		return nil, err
	}
	tree := make(map[string]Entry, len(head.Tree))
	for _, e := range head.Tree {
		tree[e.Path] = e
	}
	bySHA := map[string]Entry{}
	for _, e := range head.Tree {
		if e.Xet != "" {
			bySHA[e.SHA256] = e
		}
	}
	var blobs []op
	for _, o := range ops {
		switch o.kind {
		case "deletedFile":
			if _, ok := tree[o.path]; !ok {
				return nil, fmt.Errorf("%w: cannot delete %q: no such file at %q", ErrEntryNotFound, o.path, rev)
			}
			delete(tree, o.path)
		case "deletedFolder":
			found := false
			for p := range tree {
				if strings.HasPrefix(p, o.path+"/") {
					delete(tree, p)
					found = true
				}
			}
			if !found {
				return nil, fmt.Errorf("%w: cannot delete folder %q: no such folder at %q", ErrEntryNotFound, o.path, rev)
			}
		case "file":
			s := sha256.Sum256(o.content)
			e := Entry{Path: o.path, Size: int64(len(o.content)), SHA256: hex.EncodeToString(s[:]), OID: GitBlobID(o.content)}
			tree[o.path] = e
			blobs = append(blobs, op{sha: e.SHA256, content: o.content})
		case "lfsFile":
			e, err := h.lfsEntry(ctx, r, o, bySHA)
			if err != nil {
				return nil, err
			}
			tree[o.path] = e
		}
	}
	entries := make([]Entry, 0, len(tree))
	for _, e := range tree {
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	// A path cannot be a file and a folder at once ("a" and "a/b"): sorted, a folder's files
	// follow it immediately (after other names that extend it, like "a.txt" or "a-b").
	for i, e := range entries {
		for _, f := range entries[i+1:] {
			if !strings.HasPrefix(f.Path, e.Path) {
				break
			}
			if strings.HasPrefix(f.Path, e.Path+"/") {
				return nil, fmt.Errorf("%w: %q is a file and %q would be inside it", ErrInvalid, e.Path, f.Path)
			}
		}
	}
	for _, b := range blobs {
		key := BlobKey(b.sha)
		if _, err := h.objs.Stat(ctx, key); err == nil {
			continue
		}
		if err := h.objs.Put(ctx, key, bytes.NewReader(b.content), int64(len(b.content))); err != nil {
			return nil, fmt.Errorf("store %s: %w", key, err)
		}
	}
	msg := hdr.Summary
	if hdr.Description != "" {
		msg += "\n\n" + hdr.Description
	}
	c := newCommit(&Commit{Parent: headID, Message: msg, Author: p.User, At: h.now().Unix(), Tree: entries})
	if err := h.store.PutCommit(ctx, r.Scope(), rev, c); err != nil {
		return nil, err
	}
	return &CommitResult{Repo: r, Commit: c}, nil
}

// lfsEntry resolves an lfsFile operation: the sha256 must name a Xet file registered in this
// repository's scope (by a shard upload, or already in the head commit).
func (h *Service) lfsEntry(ctx context.Context, r Repo, o op, bySHA map[string]Entry) (Entry, error) {
	if e, ok := bySHA[o.sha]; ok {
		if o.size != nil && *o.size != e.Size {
			return Entry{}, fmt.Errorf("%w: %q: size %d, but the file with sha256 %s has %d bytes", ErrInvalid, o.path, *o.size, o.sha, e.Size)
		}
		e.Path = o.path
		return e, nil
	}
	file, size, err := h.store.LFS(ctx, r.Scope(), o.sha)
	if errors.Is(err, ErrEntryNotFound) {
		return Entry{}, fmt.Errorf("%w: %q: no file with sha256 %s was uploaded to %s (upload it through Xet first)", ErrInvalid, o.path, o.sha, r.Scope())
	}
	if err != nil {
		return Entry{}, err
	}
	if o.size != nil && *o.size != size {
		return Entry{}, fmt.Errorf("%w: %q: size %d, but the file with sha256 %s has %d bytes", ErrInvalid, o.path, *o.size, o.sha, size)
	}
	if h.xetRecord != nil {
		fh, err := hash.Parse(file)
		if err != nil {
			return Entry{}, fmt.Errorf("%w: stored xet hash %q: %v", ErrUnavailable, file, err)
		}
		if _, err := h.xetRecord(ctx, fh, r.Scope()); errors.Is(err, ErrEntryNotFound) {
			return Entry{}, fmt.Errorf("%w: %q: Xet file %s is not readable in %s", ErrInvalid, o.path, file, r.Scope())
		} else if err != nil {
			return Entry{}, err
		}
	}
	return Entry{Path: o.path, Size: size, SHA256: o.sha, Xet: file, OID: GitBlobID(lfsPointer(o.sha, size))}, nil
}
