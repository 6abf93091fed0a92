package interop

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// The later parts of TestHubFlows (docs/hub.md): branch and tag deletion, commit history, Range
// on resolve, the LFS batch upload of a client without hf_xet, transformers, token revocation.

// hubHistory: delete_branch, delete_tag and list_repo_commits through HfApi.
func hubHistory(t *testing.T, h *hubEnv, rev1, rev2 string) {
	h.mustPy(t, h.aliceW, `import sys, huggingface_hub as h
a = h.HfApi()
a.create_branch("alice/tiny", branch="tmp/x", revision=sys.argv[1])
a.create_tag("alice/tiny", tag="gone", revision=sys.argv[1])
a.delete_branch("alice/tiny", branch="tmp/x")
a.delete_tag("alice/tiny", tag="gone")
print("ok")`, rev1)
	refs := h.mustPy(t, "", `import json, huggingface_hub as h
r = h.HfApi().list_repo_refs("alice/tiny")
print(json.dumps({"branches": sorted(b.name for b in r.branches), "tags": sorted(t.name for t in r.tags)}))`)
	if refs != `{"branches": ["dev", "main"], "tags": ["v1"]}` {
		t.Fatalf("refs after deleting tmp/x and gone: %s", refs)
	}
	// The commits stay reachable by id; deleted refs no longer resolve.
	if got := h.mustPy(t, "", pyRepoSHA, "alice/tiny", rev1); got != rev1 {
		t.Fatalf("commit %s after its branch was deleted: %s", rev1, got)
	}
	// Refused deletions, in one Python process (each call with its own token; "" = none).
	refused := h.mustPy(t, "", `import sys, json, huggingface_hub as h
w, r = sys.argv[1], sys.argv[2]
def attempt(token, f):
    try:
        f(h.HfApi(token=token or False))
        return "done"
    except Exception as e:
        status = getattr(getattr(e, "response", None), "status_code", None)
        return f"{type(e).__name__} {status}: " + " ".join(str(e).split())[:300]
print(json.dumps([
    attempt(w, lambda a: a.delete_branch("alice/tiny", branch="main")),
    attempt(w, lambda a: a.delete_branch("alice/tiny", branch="nope")),
    attempt(w, lambda a: a.delete_tag("alice/tiny", tag="gone")),
    attempt(r, lambda a: a.delete_tag("alice/tiny", tag="v1")),
    attempt("", lambda a: a.delete_branch("alice/tiny", branch="dev")),
    str(h.HfApi(token=False).revision_exists("alice/tiny", "gone")),
]))`, h.aliceW, h.aliceR)
	var got []string
	if err := json.Unmarshal([]byte(refused), &got); err != nil || len(got) != 6 {
		t.Fatalf("refused deletions: %s (%v)", refused, err)
	}
	for i, want := range []string{"403", "RevisionNotFound", "RevisionNotFound", "403", "401", "False"} {
		if !strings.Contains(got[i], want) {
			t.Errorf("refused deletion %d: %q, want %s", i, got[i], want)
		}
	}

	// list_repo_commits: newest first, titles, authors, the initial commit last.
	const pyCommits = `import sys, json, huggingface_hub as h
print(json.dumps([[c.commit_id, c.title, c.authors] for c in h.HfApi().list_repo_commits(sys.argv[1], revision=sys.argv[2])]))`
	var commits [][]any
	if err := json.Unmarshal([]byte(h.mustPy(t, "", pyCommits, "alice/tiny", "main")), &commits); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(commits))
	for i, c := range commits {
		ids[i] = c[0].(string)
	}
	i1, i2 := slices.Index(ids, rev1), slices.Index(ids, rev2)
	if len(commits) < 4 || i1 < 0 || i2 < 0 || i2 > i1 || commits[i1][1] != "v1" || commits[i2][1] != "v2" ||
		commits[len(commits)-1][1] != "initial commit" || fmt.Sprint(commits[i1][2]) != "[alice]" {
		t.Fatalf("list_repo_commits(main) = %v; want v2 (%s) before v1 (%s), by alice, the initial commit last", commits, rev2, rev1)
	}
	if err := json.Unmarshal([]byte(h.mustPy(t, "", pyCommits, "alice/tiny", rev1)), &commits); err != nil {
		t.Fatal(err)
	}
	if len(commits) != 2 || commits[0][0] != rev1 {
		t.Fatalf("list_repo_commits(%s) = %v, want it and the initial commit", rev1, commits)
	}
	// A history longer than a page (100) is listed whole through the Link rel="next" pages.
	if code, body, _ := httpDo(t, "POST", h.o.url+"/api/repos/create", h.aliceW, []byte(`{"name":"hist","organization":"alice"}`)); code != 200 {
		t.Fatalf("create alice/hist: %d %s", code, body)
	}
	const n = 105 // more than a page of 100
	for i := range n {
		body := fmt.Sprintf(`{"key":"header","value":{"summary":"c%d"}}`+"\n"+`{"key":"file","value":{"path":"n.txt","content":"%d","encoding":"utf-8"}}`+"\n", i, i)
		if code, out, _ := httpDo(t, "POST", h.o.url+"/api/models/alice/hist/commit/main", h.aliceW, []byte(body)); code != 200 {
			t.Fatalf("commit %d: %d %s", i, code, out)
		}
	}
	_, _, hd := httpDo(t, "GET", h.o.url+"/api/models/alice/hist/commits/main", "", nil)
	if !strings.Contains(hd.Get("Link"), `rel="next"`) {
		t.Fatalf("no next page of %d commits: Link %q", n+1, hd.Get("Link"))
	}
	if err := json.Unmarshal([]byte(h.mustPy(t, "", pyCommits, "alice/hist", "main")), &commits); err != nil {
		t.Fatal(err)
	}
	if len(commits) != n+1 || commits[0][1] != fmt.Sprintf("c%d", n-1) || commits[n-1][1] != "c0" || commits[n][1] != "initial commit" {
		t.Fatalf("list_repo_commits(alice/hist) listed %d commits (first %v), want %d from c%d to the initial commit", len(commits), commits[0], n+1, n-1)
	}
	for _, c := range []struct {
		url  string
		want int
	}{
		{"/api/models/alice/hist/commits/main?cursor=nothex", 400},
		{"/api/models/alice/hist/commits/main?cursor=" + rev1, 404}, // a commit of another repository
		{"/api/models/alice/hist/commits/nope", 404},
	} {
		if code, body, _ := httpDo(t, "GET", h.o.url+c.url, "", nil); code != c.want {
			t.Errorf("GET %s: %d %s, want %d", c.url, code, body, c.want)
		}
	}
}

// hubRanges: Range on resolve GETs, for a Xet file (decoded by the origin for a client without
// hf_xet) and a regular file, and huggingface_hub's own resume (http_get with resume_size).
func hubRanges(t *testing.T, h *hubEnv, v2, rev2 string) {
	model, err := os.ReadFile(filepath.Join(v2, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	gen, err := os.ReadFile(filepath.Join(v2, "sub", "generation_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(model))
	mid := size/2 + 12345 // inside a term, not on a chunk boundary
	xetURL := h.o.url + "/alice/tiny/resolve/" + rev2 + "/model.safetensors"
	regURL := h.o.url + "/alice/tiny/resolve/" + rev2 + "/sub/generation_config.json"
	cases := []struct {
		name, url, rng string
		want           []byte
		total          int64
	}{
		{"xet middle", xetURL, fmt.Sprintf("bytes=%d-%d", mid, mid+100000), model[mid : mid+100001], size},
		{"xet open", xetURL, fmt.Sprintf("bytes=%d-", mid), model[mid:], size},
		{"xet suffix", xetURL, "bytes=-1000", model[size-1000:], size},
		{"xet first byte", xetURL, "bytes=0-0", model[:1], size},
		{"xet end clamped", xetURL, fmt.Sprintf("bytes=%d-%d", size-10, size+99), model[size-10:], size},
		{"regular", regURL, "bytes=2-5", gen[2:6], int64(len(gen))},
	}
	for _, c := range cases {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", c.url, nil)
		req.Header.Set("Range", c.rng)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		start := rangeStart(c.rng, c.total)
		wantCR := fmt.Sprintf("bytes %d-%d/%d", start, start+int64(len(c.want))-1, c.total)
		if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body.Bytes(), c.want) || resp.Header.Get("Content-Range") != wantCR {
			t.Fatalf("%s: GET %s Range %s: %d, Content-Range %q (want %q), %d bytes (want %d), equal %v", c.name, c.url, c.rng,
				resp.StatusCode, resp.Header.Get("Content-Range"), wantCR, body.Len(), len(c.want), bytes.Equal(body.Bytes(), c.want))
		}
	}
	code, _, hd := httpDo(t, "HEAD", xetURL, "", nil)
	if code != 200 || hd.Get("Accept-Ranges") != "bytes" {
		t.Fatalf("HEAD %s: %d, Accept-Ranges %q", xetURL, code, hd.Get("Accept-Ranges"))
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", xetURL, nil)
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-", size))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable || resp.Header.Get("Content-Range") != fmt.Sprintf("bytes */%d", size) {
		t.Fatalf("Range past the end: %d, Content-Range %q", resp.StatusCode, resp.Header.Get("Content-Range"))
	}

	// huggingface_hub's resume: http_get appends to a partial file from resume_size with
	// "Range: bytes=N-". The partial file holds a marker, not the real first half: a server that
	// ignored the Range (200) makes the client start over and the marker disappears; served,
	// the result is the marker followed by the real rest of the file.
	dir := t.TempDir()
	for _, c := range []struct {
		url  string
		data []byte
	}{{xetURL, model}, {regURL, gen}} {
		half := int64(len(c.data)) / 2
		part := filepath.Join(dir, "part")
		marker := bytes.Repeat([]byte{'#'}, int(half))
		writeFile(t, part, marker)
		h.mustPy(t, "", `import sys, huggingface_hub.file_download as fd
with open(sys.argv[2], "ab") as f:
    fd.http_get(sys.argv[1], f, resume_size=int(sys.argv[3]), expected_size=int(sys.argv[4]))
print("ok")`, c.url, part, fmt.Sprint(half), fmt.Sprint(len(c.data)))
		got, err := os.ReadFile(part)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, append(marker, c.data[half:]...)) {
			t.Fatalf("resumed download of %s: %d bytes, marker kept %v: the Range was not served", c.url, len(got), bytes.HasPrefix(got, marker))
		}
	}
}

// rangeStart is the first byte a one-range header selects of total bytes.
func rangeStart(rng string, total int64) int64 {
	spec := strings.TrimPrefix(rng, "bytes=")
	if strings.HasPrefix(spec, "-") {
		var n int64
		fmt.Sscan(spec[1:], &n)
		return total - n
	}
	var s int64
	fmt.Sscan(strings.SplitN(spec, "-", 2)[0], &s)
	return s
}

// noXet runs f with HF_HUB_DISABLE_XET=1 (huggingface_hub as without hf_xet).
func (h *hubEnv) noXet(f func()) {
	saved := h.baseEnv
	h.baseEnv = append(append([]string(nil), saved...), "HF_HUB_DISABLE_XET=1")
	defer func() { h.baseEnv = saved }()
	f()
}

// hubLFS: huggingface_hub without hf_xet uploads through the LFS batch API (basic transfer);
// the files are byte-exact when downloaded with hf_xet through the edge, and bad LFS requests
// are refused, storing nothing.
func hubLFS(t *testing.T, h *hubEnv) {
	src := t.TempDir()
	rng := mrand.NewChaCha8([32]byte{99})
	writeRandom(t, filepath.Join(src, "weights.bin"), 5<<20+77, rng)
	writeRandom(t, filepath.Join(src, "sub", "more.bin"), 3<<20, rng)
	writeFile(t, filepath.Join(src, "config.json"), []byte(`{"lfs": true}`+"\n"))
	var out string
	h.noXet(func() {
		out = h.mustRun(t, h.aliceW, h.hf, "upload", "alice/lfs", src, ".", "--commit-message", "lfs v1")
	})
	reconBefore := reconRequests(t, h.o)
	snap := h.mustPy(t, "", pySnapshot, "alice/lfs", "main", t.TempDir())
	sameTree(t, src, snap)
	if got := reconRequests(t, h.o); got != reconBefore {
		t.Fatalf("the LFS-uploaded files were not downloaded through the edge (%v origin reconstructions)", got-reconBefore)
	}
	tree := h.mustPy(t, "", `import json, huggingface_hub as h
print(json.dumps(sorted([f.path, f.xet_hash is not None] for f in h.HfApi().list_repo_tree("alice/lfs", recursive=True) if hasattr(f, "size"))))`)
	if tree != `[["config.json", false], ["sub/more.bin", true], ["weights.bin", true]]` {
		t.Fatalf("alice/lfs tree (path, is a Xet file): %s (upload output: %s)", tree, tail(out, 5))
	}

	// A second upload of the same bytes under another name: the batch answers no actions.
	weights, _ := os.ReadFile(filepath.Join(src, "weights.bin"))
	sum := sha256.Sum256(weights)
	oid := hex.EncodeToString(sum[:])
	batch := func(token string, body string) (int, string) {
		code, b, _ := httpDo(t, "POST", h.o.url+"/alice/lfs.git/info/lfs/objects/batch", token, []byte(body))
		return code, b
	}
	obj := func(oid string, size int) string { return fmt.Sprintf(`{"oid":%q,"size":%d}`, oid, size) }
	req := func(objs ...string) string {
		return `{"operation":"upload","transfers":["basic","multipart"],"hash_algo":"sha256","objects":[` + strings.Join(objs, ",") + `]}`
	}
	code, body := batch(h.aliceW, req(obj(oid, len(weights))))
	if code != 200 || strings.Contains(body, "actions") || !strings.Contains(body, `"transfer":"basic"`) {
		t.Fatalf("batch for an uploaded object: %d %s, want no actions", code, body)
	}

	// huggingface.js offers the xet transfer (and says sha_256): the answer is "xet", with the
	// write-token route as href and a working CAS write token in the header.
	other := strings.Repeat("ab", 32)
	xetReq := `{"operation":"upload","transfers":["basic","multipart","xet"],"hash_algo":"sha_256","ref":{"name":"main"},"objects":[` +
		obj(other, 10) + "," + obj(oid, len(weights)) + `]}`
	code, body = batch(h.aliceW, xetReq)
	var xans struct {
		Transfer string
		Objects  []struct {
			OID     string
			Actions *struct {
				Upload struct {
					Href   string
					Header map[string]string
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &xans); code != 200 || err != nil || xans.Transfer != "xet" || len(xans.Objects) != 2 ||
		xans.Objects[0].Actions == nil || xans.Objects[1].Actions != nil {
		t.Fatalf("batch offering xet: %d %s; want transfer xet, an upload action for the new object only", code, body)
	}
	up := xans.Objects[0].Actions.Upload
	if up.Href != h.o.url+"/api/models/alice/lfs/xet-write-token/main" || up.Header["X-Xet-Cas-Url"] != h.o.url || up.Header["X-Xet-Token-Expiration"] == "" {
		t.Fatalf("xet upload action %+v", up)
	}
	if code, b, _ := httpDo(t, "GET", up.Header["X-Xet-Cas-Url"]+"/v1/chunks/default/"+other, up.Header["X-Xet-Access-Token"], nil); code != 404 {
		t.Fatalf("the xet action's token on the dedup route: %d %s, want 404 (accepted, nothing found)", code, b)
	}
	if code, b, _ := httpDo(t, "GET", up.Href, h.aliceW, nil); code != 200 {
		t.Fatalf("the xet action's href: %d %s", code, b)
	}

	// Bad input: clear 4xx in the Hub's shape; nothing stored.
	many := make([]string, 1001)
	for i := range many {
		many[i] = obj(other, 1)
	}
	for _, c := range []struct {
		name, token, body string
		want              int
	}{
		{"not JSON", h.aliceW, `{"operation":`, 400},
		{"download operation", h.aliceW, `{"operation":"download","objects":[` + obj(other, 1) + `]}`, 400},
		{"neither basic nor xet", h.aliceW, `{"operation":"upload","transfers":["multipart"],"objects":[` + obj(other, 1) + `]}`, 400},
		{"bad hash_algo", h.aliceW, `{"operation":"upload","hash_algo":"md5","objects":[` + obj(other, 1) + `]}`, 400},
		{"bad oid", h.aliceW, req(obj("XYZ", 1)), 400},
		{"negative size", h.aliceW, req(obj(other, -1)), 400},
		{"no objects", h.aliceW, req(), 400},
		{"too many objects", h.aliceW, req(many...), 413},
		{"oversized object", h.aliceW, req(fmt.Sprintf(`{"oid":%q,"size":%d}`, other, int64(1)<<41)), 413},
		{"size mismatch", h.aliceW, req(obj(oid, 5)), 200}, // a per-object error 422
		{"read token", h.aliceR, req(obj(other, 1)), 403},
		{"foreign token", h.bobW, req(obj(other, 1)), 403},
		{"anonymous", "", req(obj(other, 1)), 401},
	} {
		code, body := batch(c.token, c.body)
		if code != c.want || (code != 200 && !strings.Contains(body, `"error"`)) || (code == 200 && !strings.Contains(body, `"code":422`)) {
			t.Errorf("batch %s: %d %s, want %d", c.name, code, tail(body, 3), c.want)
		}
	}
	// An upload href: the PUT checks length and sha256; wrong bytes store nothing.
	data := []byte("the real bytes of a small LFS object\n")
	ds := sha256.Sum256(data)
	doid := hex.EncodeToString(ds[:])
	code, body = batch(h.aliceW, req(obj(doid, len(data))))
	var ans struct {
		Objects []struct {
			Actions struct {
				Upload, Verify struct{ Href string }
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &ans); code != 200 || err != nil || len(ans.Objects) != 1 || ans.Objects[0].Actions.Upload.Href == "" {
		t.Fatalf("batch for a new object: %d %s", code, body)
	}
	put, verify := ans.Objects[0].Actions.Upload.Href, ans.Objects[0].Actions.Verify.Href
	verifyBody := []byte(obj(doid, len(data)))
	wrong := bytes.ToUpper(data)
	for _, c := range []struct {
		name, url string
		body      []byte
		want      int
	}{
		{"wrong bytes", put, wrong, 400},
		{"short body", put, data[:10], 400},
		{"no token", strings.Split(put, "?")[0], data, 401},
		{"forged token", strings.Split(put, "?")[0] + "?token=eyJhbGciOiJFZERTQSJ9.e30.AAAA", data, 401},
		{"other repository", strings.Replace(put, "/alice/lfs.git/", "/alice/tiny.git/", 1), data, 403},
		{"bad object path", strings.Replace(put, "/"+doid+"/", "/nothex/", 1), data, 400},
	} {
		code, b, _ := httpDo(t, "PUT", c.url, "", c.body)
		if code != c.want {
			t.Errorf("PUT %s: %d %s, want %d", c.name, code, b, c.want)
		}
	}
	if code, b, _ := httpDo(t, "POST", verify, h.aliceW, verifyBody); code != 404 {
		t.Fatalf("verify after refused PUTs: %d %s, want 404 (nothing stored)", code, b)
	}
	if code, b, _ := httpDo(t, "PUT", put, "", data); code != 200 {
		t.Fatalf("PUT of the right bytes: %d %s", code, b)
	}
	if code, b, _ := httpDo(t, "POST", verify, h.aliceR, verifyBody); code != 403 {
		t.Fatalf("verify with a read token: %d %s, want 403", code, b)
	}
	if code, b, _ := httpDo(t, "POST", verify, h.aliceW, verifyBody); code != 200 {
		t.Fatalf("verify after the PUT: %d %s", code, b)
	}
}

// hubTransformers: AutoConfig and AutoTokenizer of transformers (without torch) load a tiny
// model repository uploaded with hf upload, and the safetensors package loads its weights
// downloaded through the edge. Model weights through a torch from_pretrained are not tested:
// torch is far too large for the test venv.
func hubTransformers(t *testing.T, h *hubEnv) {
	src := t.TempDir()
	h.mustPy(t, "", `import sys, os, json, numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers
from safetensors.numpy import save_file
d = sys.argv[1]
tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0, "[PAD]": 1, "hello": 2, "world": 3, "xet": 4, "cdn": 5}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.save(os.path.join(d, "tokenizer.json"))
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "pad_token": "[PAD]"}, open(os.path.join(d, "tokenizer_config.json"), "w"))
json.dump({"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37, "vocab_size": 6}, open(os.path.join(d, "config.json"), "w"))
save_file({"w": np.arange(1 << 19, dtype=np.float32)}, os.path.join(d, "model.safetensors"))
print("ok")`, src)
	h.mustRun(t, h.aliceW, h.hf, "upload", "alice/tiny-bert", src, ".")
	reconBefore := reconRequests(t, h.o)
	got := h.mustPy(t, "", `import sys, huggingface_hub as h
from transformers import AutoConfig, AutoTokenizer
from safetensors.numpy import load_file
c = AutoConfig.from_pretrained("alice/tiny-bert", cache_dir=sys.argv[1])
t = AutoTokenizer.from_pretrained("alice/tiny-bert", cache_dir=sys.argv[1])
w = load_file(h.hf_hub_download("alice/tiny-bert", "model.safetensors", cache_dir=sys.argv[1]))["w"]
print(type(c).__name__, c.hidden_size, c.num_hidden_layers, t("hello xet cdn world")["input_ids"], w.dtype, w.shape[0], int(w[12345]), int(w[-1]))`, t.TempDir())
	want := fmt.Sprintf("BertConfig 32 2 [2, 4, 5, 3] float32 %d 12345 %d", 1<<19, 1<<19-1)
	if got != want {
		t.Fatalf("transformers loaded %q, want %q", got, want)
	}
	if r := reconRequests(t, h.o); r != reconBefore {
		t.Fatalf("the safetensors file was not downloaded through the edge (%v origin reconstructions)", r-reconBefore)
	}
}

// hubRevoke: tokens list shows ids, never tokens; a revoked token is refused at once.
func hubRevoke(t *testing.T, h *hubEnv) {
	code, tok, stderr := h.admin(t, "tokens", "create", "--user", "alice", "--grant", "models/alice/*:write")
	tok = strings.TrimSpace(tok)
	if code != 0 || !strings.HasPrefix(tok, "hf_") {
		t.Fatalf("tokens create: %d %s %s", code, tok, stderr)
	}
	if out := h.mustRun(t, tok, h.hf, "auth", "whoami"); !strings.Contains(out, "alice") {
		t.Fatalf("hf auth whoami with the new token: %s", out)
	}
	code, list, stderr := h.admin(t, "tokens", "list", "--user", "alice")
	sum := sha256.Sum256([]byte(tok))
	id := hex.EncodeToString(sum[:])[:16]
	if code != 0 || !strings.Contains(list, id) || strings.Contains(list, "hf_") || !strings.Contains(list, "models/alice/*:write") {
		t.Fatalf("tokens list: %d %q %s; want the id %s and no token", code, list, stderr, id)
	}
	if code, _, stderr := h.admin(t, "tokens", "revoke", id); code != 0 {
		t.Fatalf("tokens revoke %s: %d %s", id, code, stderr)
	}
	// At once: the very next requests are refused (no token cache).
	if out, err := h.run(t, tok, h.hf, "auth", "whoami"); err == nil {
		t.Fatalf("hf auth whoami with a revoked token succeeded: %s", out)
	}
	if code, body, _ := httpDo(t, "GET", h.o.url+"/api/models/alice/secret", tok, nil); code != 401 {
		t.Fatalf("a revoked token read a private repository: %d %s", code, body)
	}
	if code, body, _ := httpDo(t, "GET", h.o.url+"/api/models/alice/tiny/xet-write-token/main", tok, nil); code != 401 {
		t.Fatalf("a revoked token obtained a write CAS token: %d %s", code, body)
	}
	if _, list, _ = h.admin(t, "tokens", "list"); strings.Contains(list, id) || !strings.Contains(list, "bob") {
		t.Fatalf("tokens list after the revocation: %s", list)
	}
	for _, a := range [][]string{
		{"tokens", "revoke", id},             // already revoked
		{"tokens", "revoke", "0123"},         // not an id
		{"tokens", "revoke"},                 // nothing named
		{"tokens", "revoke", "hf_NotAToken"}, // unknown token
		{"tokens", "list", "--user", "alice", "x"},
	} {
		if code, stdout, stderr := h.admin(t, a...); code != 2 || stderr == "" || strings.Contains(stdout, "hf_") {
			t.Errorf("xet-origin %v: exit %d, stdout %q, stderr %q; want 2 and an error", a, code, stdout, stderr)
		}
	}
	// Revoking by the token itself also works.
	_, tok2, _ := h.admin(t, "tokens", "create", "--user", "bob", "--grant", "models/bob/*:read")
	tok2 = strings.TrimSpace(tok2)
	if code, _, stderr := h.admin(t, "tokens", "revoke", tok2); code != 0 {
		t.Fatalf("tokens revoke TOKEN: %d %s", code, stderr)
	}
	if code, _, _ := httpDo(t, "GET", h.o.url+"/api/whoami-v2", tok2, nil); code != 401 {
		t.Fatalf("whoami with a token revoked by value: %d", code)
	}
}

// hfjsUpload is a huggingface.js (@huggingface/hub) upload through its uploadFiles, with no shim:
// preupload, the LFS batch (answered "xet"), the CAS through the batch's token, the commit.
const hfjsUpload = `import { uploadFiles } from "@huggingface/hub";
import { readFile } from "node:fs/promises";
import { basename } from "node:path";
const [hubUrl, accessToken, name, ...paths] = process.argv.slice(2);
const files = [];
for (const p of paths) files.push({ path: basename(p), content: new Blob([await readFile(p)]) });
const res = await uploadFiles({ repo: { type: "model", name }, accessToken, hubUrl, files });
console.log(JSON.stringify(res?.commit ?? res ?? null));
`

// hubHFJS: huggingface.js uploads through the Hub API unmodified (the LFS batch's xet transfer);
// huggingface_hub downloads the files through the edge, byte-exact.
func hubHFJS(t *testing.T, h *hubEnv) {
	nodeDir := testenv.Require(t, testenv.NodeModules)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: %v", err)
	}
	mods, err := filepath.Abs(filepath.Join(nodeDir, "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(mods, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "upload.mjs")
	writeFile(t, script, []byte(hfjsUpload))
	src := t.TempDir()
	writeRandom(t, filepath.Join(src, "big.bin"), 4<<20+3, mrand.NewChaCha8([32]byte{5}))
	writeFile(t, filepath.Join(src, "notes.txt"), []byte("small, inline\n"))
	if code, body, _ := httpDo(t, "POST", h.o.url+"/api/repos/create", h.aliceW, []byte(`{"name":"js","organization":"alice"}`)); code != 200 {
		t.Fatalf("create alice/js: %d %s", code, body)
	}
	before := h.o.xorbIngestBytes(t)
	out := h.mustRun(t, "", node, script, h.o.url, h.aliceW, "alice/js", filepath.Join(src, "big.bin"), filepath.Join(src, "notes.txt"))
	if sent := h.o.xorbIngestBytes(t) - before; sent < 4<<20 {
		t.Fatalf("huggingface.js sent %d xorb bytes for a 4 MiB file: it did not upload through the CAS (%s)", sent, tail(out, 5))
	}
	// Through the xet transfer the client uploads itself: the origin's LFS PUT path (which logs
	// each object it stores) is not used.
	if strings.Contains(h.proc.Log(), `"scope":"models/alice/js"`) {
		t.Fatalf("huggingface.js's file went through the LFS basic PUT, not the xet transfer")
	}
	snap := h.mustPy(t, "", pySnapshot, "alice/js", "main", t.TempDir())
	sameTree(t, src, snap)
}
