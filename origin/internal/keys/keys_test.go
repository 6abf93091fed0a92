package keys

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestLoadCreatesThenReuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	k1, err := Load(dir, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{SigningFile, TransferFile, DedupFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v", f, st.Mode().Perm())
		}
	}
	k2, err := Load(dir, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if k1.Signing.ID != k2.Signing.ID || !bytes.Equal(k1.Transfer, k2.Transfer) || k1.Dedup != k2.Dedup {
		t.Fatal("second load returned different keys")
	}
	if k1.Dedup.IsZero() || bytes.Equal(k1.Transfer, make([]byte, 32)) {
		t.Fatal("keys are zero")
	}
	ks, err := k1.KeySet()
	if err != nil || ks.Len() != 1 {
		t.Fatalf("key set: %v", err)
	}
}

func TestLoadWithoutCreate(t *testing.T) {
	if _, err := Load(t.TempDir(), nil, false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir, nil, true); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, DedupFile), []byte("short"), 0o600)
	if _, err := Load(dir, nil, false); err == nil {
		t.Fatal("short dedup key accepted")
	}
	os.WriteFile(filepath.Join(dir, SigningFile), []byte("junk"), 0o600)
	if _, err := Load(dir, nil, false); err == nil {
		t.Fatal("junk signing key accepted")
	}
}

func TestConcurrentFirstStart(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := Load(dir, nil, true)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = k.Signing.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("racing first starts disagree on the key: %v", ids)
		}
	}
}

// TestFromSecret: one secret gives the same keys every time (two replicas agree), another
// secret different ones, a previous secret adds its verifying key only, a short one is refused.
func TestFromSecret(t *testing.T) {
	s1, s2 := bytes.Repeat([]byte("a"), MinSecretLen), bytes.Repeat([]byte("b"), MinSecretLen+5)
	k1, err := FromSecret(s1, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := FromSecret(bytes.Clone(s1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if k1.Signing.ID != again.Signing.ID || !k1.Signing.Private.Equal(again.Signing.Private) ||
		!bytes.Equal(k1.Transfer, again.Transfer) || k1.Dedup != again.Dedup {
		t.Fatal("the same secret derived different keys")
	}
	k2, err := FromSecret(s2, s1)
	if err != nil {
		t.Fatal(err)
	}
	if k2.Signing.ID == k1.Signing.ID || bytes.Equal(k2.Transfer, k1.Transfer) || k2.Dedup == k1.Dedup {
		t.Fatal("different secrets derived a common key")
	}
	if bytes.Equal(k1.Transfer, k1.Dedup[:]) || len(k1.Transfer) != 32 {
		t.Fatal("transfer and dedup keys are not distinct 32-byte keys")
	}
	ks, err := k2.KeySet()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ks.Lookup(k1.Signing.ID); !ok || ks.Len() != 2 {
		t.Fatalf("rotated key set has %d keys, previous present %v", ks.Len(), ok)
	}
	if _, err := FromSecret(s1[:MinSecretLen-1], nil); !errors.Is(err, ErrSecret) {
		t.Fatalf("short secret: %v", err)
	}
	if _, err := FromSecret(s2, s1[:4]); !errors.Is(err, ErrSecret) {
		t.Fatalf("short previous secret: %v", err)
	}
}
