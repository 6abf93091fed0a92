package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// The git-LFS batch API, for a huggingface_hub without hf_xet (HF_HUB_DISABLE_XET=1, or hf_xet
// not installed): huggingface_hub 2.4.0 then posts the large files' sha256s to
// POST /{repo}.git/info/lfs/objects/batch with transfers ["basic", "multipart"], PUTs each
// file's bytes to the upload action's href (no headers: the href carries its credential),
// POSTs {oid, size} to the verify action's href with its token, and commits the files as
// lfsFile operations. huggingface.js offers "xet" too (transfers ["basic", "multipart", "xet"]):
// it is then answered "xet", each object to upload with an upload action whose href is the
// repository's xet-write-token route and whose header holds a write token (X-Xet-Cas-Url,
// X-Xet-Access-Token, X-Xet-Token-Expiration), and the client uploads through the CAS itself.
// Otherwise the transfer is "basic" (one PUT; "multipart" is not offered). The PUT's bytes
// are spooled to a temporary file while their sha256 is computed; when length and sha256 match
// the oid, the origin uploads the file through its own CAS routes (xetclient, as a stock client
// would: chunked, deduplicated, one shard registered in the repository's scope), so the file
// becomes a Xet file like one hf_xet uploaded and the commit names it by sha256 (Registered).
// A PUT whose bytes do not match is refused and leaves nothing. docs/hub.md, "LFS".

// Limits of the LFS routes.
const (
	// MaxLFSBatchObjects bounds the objects of one batch request (huggingface_hub sends 256).
	MaxLFSBatchObjects = 1000
	// MaxLFSObject bounds one object's size.
	MaxLFSObject = 1 << 40
	// lfsUploadTTL is the life of an upload href (its CAS write token).
	lfsUploadTTL = time.Hour
)

const lfsContentType = "application/vnd.git-lfs+json"

var oidRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// SetMintCAS sets how the LFS routes mint a CAS write token for a repository scope (the
// origin's signing key). Without it the batch route answers 501. Call it before serving.
func (h *Service) SetMintCAS(f func(scope string, ttl time.Duration) (string, error)) {
	h.mintCAS = f
}

// serveLFS answers the LFS routes under escaped ("{ns}/{name}.git/info/lfs/..."); it reports
// false for any other path.
func (h *Service) serveLFS(w http.ResponseWriter, r *http.Request, typ, escaped string) bool {
	repoPart, rest, ok := strings.Cut(escaped, ".git/info/lfs/")
	if !ok {
		return false
	}
	var err error
	switch {
	case r.Method == http.MethodPost && rest == "objects/batch":
		err = h.lfsBatch(w, r, typ, repoPart)
	case r.Method == http.MethodPost && rest == "verify":
		err = h.lfsVerify(w, r, typ, repoPart)
	case r.Method == http.MethodPut && strings.HasPrefix(rest, "objects/"):
		err = h.lfsPut(w, r, typ, repoPart, strings.TrimPrefix(rest, "objects/"))
	default:
		err = fmt.Errorf("%w: no such LFS route", errNoRoute)
	}
	if err != nil {
		h.writeError(w, r, err)
	}
	return true
}

// lfsRepoID unescapes "{ns}/{name}".
func lfsRepoID(escaped string) (string, error) {
	id, err := url.PathUnescape(escaped)
	if err != nil {
		return "", fmt.Errorf("%w: bad escape in path", ErrInvalid)
	}
	return id, CheckRepoID(id)
}

type lfsObject struct {
	OID  string `json:"oid"`
	Size *int64 `json:"size"`
}

func (h *Service) lfsBatch(w http.ResponseWriter, r *http.Request, typ, escaped string) error {
	if h.mintCAS == nil {
		return fmt.Errorf("%w: LFS uploads are not configured on this server; install hf_xet", errNotImplemented)
	}
	repo, err := h.lfsWritableRepo(r, typ, escaped)
	if err != nil {
		return err
	}
	var body struct {
		Operation string      `json:"operation"`
		Transfers []string    `json:"transfers"`
		Objects   []lfsObject `json:"objects"`
		HashAlgo  string      `json:"hash_algo"`
		Ref       *struct {
			Name string `json:"name"`
		} `json:"ref"`
	}
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	switch {
	case body.Operation != "upload":
		return fmt.Errorf("%w: LFS operation %q: only upload is served (downloads use resolve)", ErrInvalid, body.Operation)
	case body.HashAlgo != "" && body.HashAlgo != "sha256" && body.HashAlgo != "sha_256": // huggingface.js: sha_256
		return fmt.Errorf("%w: hash_algo %q: only sha256", ErrInvalid, body.HashAlgo)
	case len(body.Transfers) > 0 && !slices.Contains(body.Transfers, "basic") && !slices.Contains(body.Transfers, "xet"):
		return fmt.Errorf("%w: transfers %q: this server offers basic and xet", ErrInvalid, body.Transfers)
	case len(body.Objects) == 0:
		return fmt.Errorf("%w: no objects", ErrInvalid)
	case len(body.Objects) > MaxLFSBatchObjects:
		return fmt.Errorf("%w: more than %d objects in one batch", ErrTooLarge, MaxLFSBatchObjects)
	}
	for _, o := range body.Objects {
		if !oidRE.MatchString(o.OID) || o.Size == nil || *o.Size < 0 {
			return fmt.Errorf("%w: object %q: want a lower-case hex sha256 oid and a size", ErrInvalid, o.OID)
		}
		if *o.Size > MaxLFSObject {
			return fmt.Errorf("%w: object %s: %d bytes, at most %d", ErrTooLarge, o.OID, *o.Size, int64(MaxLFSObject))
		}
	}
	tok, err := h.mintCAS(repo.Scope(), lfsUploadTTL)
	if err != nil {
		return err
	}
	expAt := h.now().Add(lfsUploadTTL - time.Second)
	exp := expAt.UTC().Format(time.RFC3339)
	base := h.public + "/" + lfsPrefix(repo) + repo.ID + ".git/info/lfs/"
	transfer := "basic"
	var upload, verify map[string]any
	if slices.Contains(body.Transfers, "xet") {
		transfer = "xet"
		rev := "main"
		if body.Ref != nil && body.Ref.Name != "" {
			rev = body.Ref.Name
		}
		upload = map[string]any{
			"href": fmt.Sprintf("%s/api/%s/%s/xet-write-token/%s", h.public, Plural(repo.Type), repo.ID, url.PathEscape(rev)),
			"header": map[string]string{"X-Xet-Cas-Url": h.public, "X-Xet-Access-Token": tok,
				"X-Xet-Token-Expiration": strconv.FormatInt(expAt.Unix(), 10)},
			"expires_at": exp,
		}
	}
	out := make([]map[string]any, 0, len(body.Objects))
	for _, o := range body.Objects {
		a := map[string]any{"oid": o.OID, "size": *o.Size, "authenticated": true}
		_, size, err := h.store.LFS(r.Context(), repo.Scope(), o.OID)
		switch {
		case err == nil && size != *o.Size:
			a["error"] = map[string]any{"code": http.StatusUnprocessableEntity,
				"message": fmt.Sprintf("the object with this sha256 has %d bytes, not %d", size, *o.Size)}
		case err == nil:
			// Already uploaded to this repository: no actions, the client skips it.
		case errors.Is(err, ErrEntryNotFound) && transfer == "xet":
			a["actions"] = map[string]any{"upload": upload}
		case errors.Is(err, ErrEntryNotFound):
			upload = map[string]any{"href": base + "objects/" + o.OID + "/" + strconv.FormatInt(*o.Size, 10) +
				"?token=" + url.QueryEscape(tok), "expires_at": exp}
			verify = map[string]any{"href": base + "verify", "expires_at": exp}
			a["actions"] = map[string]any{"upload": upload, "verify": verify}
		default:
			return err
		}
		out = append(out, a)
	}
	w.Header().Set("Content-Type", lfsContentType)
	w.WriteHeader(http.StatusOK)
	return json.NewEncoder(w).Encode(map[string]any{"transfer": transfer, "objects": out, "hash_algo": "sha256"})
}

// lfsPrefix is the URL prefix of a repository's git routes: "" for models, "datasets/".
func lfsPrefix(r Repo) string {
	if r.Type == Model {
		return ""
	}
	return Plural(r.Type) + "/"
}

// lfsPut takes the bytes of one object: PUT .../objects/{oid}/{size}?token=CAS-write-token.
func (h *Service) lfsPut(w http.ResponseWriter, r *http.Request, typ, escaped, obj string) error {
	id, err := lfsRepoID(escaped)
	if err != nil {
		return err
	}
	oid, sizeStr, ok := strings.Cut(obj, "/")
	size, serr := strconv.ParseInt(sizeStr, 10, 64)
	if !ok || !oidRE.MatchString(oid) || serr != nil || size < 0 || size > MaxLFSObject {
		return fmt.Errorf("%w: LFS object path %q is not {sha256}/{size}", ErrInvalid, obj)
	}
	tok := r.URL.Query().Get("token")
	if tok == "" || h.verifyCAS == nil {
		return fmt.Errorf("%w: the upload URL carries no token", ErrUnauthorized)
	}
	ar := r.Clone(r.Context())
	ar.Header.Set("Authorization", "Bearer "+tok)
	c, err := h.verifyCAS(ar)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnauthorized, err)
	}
	repo, err := h.store.Repo(r.Context(), typ, id)
	if err != nil {
		return err
	}
	if c.Access != auth.Write || c.Scope != repo.Scope() {
		return fmt.Errorf("%w: the upload URL's token is not for %s", ErrForbidden, repo.Scope())
	}
	if r.ContentLength >= 0 && r.ContentLength != size {
		return fmt.Errorf("%w: Content-Length %d, the object has %d bytes", ErrInvalid, r.ContentLength, size)
	}
	if _, have, err := h.store.LFS(r.Context(), repo.Scope(), oid); err == nil && have == size {
		io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, size))
		w.WriteHeader(http.StatusOK)
		return nil
	}
	f, err := os.CreateTemp("", "xetcdn-lfs-*")
	if err != nil {
		return fmt.Errorf("%w: spool file: %v", ErrUnavailable, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, sum), http.MaxBytesReader(w, r.Body, size+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: more than the %d bytes of the object", ErrInvalid, size)
		}
		return fmt.Errorf("%w: reading the object: %v", ErrInvalid, err)
	}
	if n != size {
		return fmt.Errorf("%w: %d bytes received, the object has %d", ErrInvalid, n, size)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != oid {
		return fmt.Errorf("%w: the bytes received have sha256 %s, not %s", ErrInvalid, got, oid)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%w: spool file: %v", ErrUnavailable, err)
	}
	if err := h.ingestFile(r.Context(), repo, f.Name(), oid); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// ingestFile uploads a checked file through the origin's own CAS routes into repo's scope.
func (h *Service) ingestFile(ctx context.Context, repo Repo, path, oid string) error {
	tok, err := h.mintCAS(repo.Scope(), lfsUploadTTL)
	if err != nil {
		return err
	}
	c, err := xetclient.New(xetclient.Options{Endpoint: h.public, Token: tok, Concurrency: 2,
		UserAgent: "xetcdn-origin-lfs/1"})
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := c.UploadFiles(ctx, []xetclient.UploadFile{{Path: path}}, xetclient.UploadOptions{})
	if err != nil {
		return fmt.Errorf("%w: storing the LFS object through the CAS: %v", ErrUnavailable, err)
	}
	if got := hex.EncodeToString(res[0].SHA256[:]); got != oid {
		return fmt.Errorf("%w: the stored file has sha256 %s, not %s", ErrUnavailable, got, oid)
	}
	h.log.Info("hub: LFS object stored as a Xet file", "scope", repo.Scope(), "sha256", oid,
		"file", res[0].FileHash.String(), "size", res[0].Size, "sent", res[0].BytesSent)
	return nil
}

// lfsWritableRepo is the repository of an LFS route (escaped: its {id}.git path part) the caller
// may write to.
func (h *Service) lfsWritableRepo(r *http.Request, typ, escaped string) (Repo, error) {
	id, err := lfsRepoID(escaped)
	if err != nil {
		return Repo{}, err
	}
	p, err := h.principal(r.Context(), r)
	if err != nil {
		return Repo{}, err
	}
	return h.writableRepo(r.Context(), p, typ, id)
}

// lfsVerify answers the verify action: 200 when the object is stored in the repository.
func (h *Service) lfsVerify(w http.ResponseWriter, r *http.Request, typ, escaped string) error {
	repo, err := h.lfsWritableRepo(r, typ, escaped)
	if err != nil {
		return err
	}
	var o lfsObject
	if err := readJSON(w, r, &o); err != nil {
		return err
	}
	if !oidRE.MatchString(o.OID) || o.Size == nil {
		return fmt.Errorf("%w: want {\"oid\": sha256, \"size\": n}", ErrInvalid)
	}
	_, size, err := h.store.LFS(r.Context(), repo.Scope(), o.OID)
	if err != nil {
		return fmt.Errorf("%w: object %s was not uploaded to %s", err, o.OID, repo.Scope())
	}
	if size != *o.Size {
		return fmt.Errorf("%w: object %s has %d bytes, not %d", ErrInvalid, o.OID, size, *o.Size)
	}
	w.Header().Set("Content-Type", lfsContentType)
	w.WriteHeader(http.StatusOK)
	return json.NewEncoder(w).Encode(map[string]any{"oid": o.OID, "size": size})
}
