// Package keys keeps the origin's secret key material in its key directory:
//
//	<dir>/signing.pem   Ed25519 private key (PKCS#8 PEM) that signs access tokens
//	<dir>/transfer.key  32 random bytes: HMAC key of signed transfer URLs
//	<dir>/dedup.key     32 random bytes: HMAC key of chunk hashes in global-dedup answers
//
// Load creates missing files on first start (mode 0600, directory 0700, written to a temporary
// file, synced and renamed, so a crash never leaves a half-written key) and reads existing ones
// otherwise. Several origin replicas share the directory (or copies of it), so they sign and
// verify alike; the `token` subcommand reads the same files.
package keys

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// File names inside the key directory.
const (
	SigningFile  = "signing.pem"
	TransferFile = "transfer.key"
	DedupFile    = "dedup.key"
	secretLen    = 32
)

// Keys is the origin's key material. It is immutable once loaded.
type Keys struct {
	Signing  *auth.SigningKey
	Transfer []byte    // HMAC-SHA256 key of transfer URLs
	Dedup    hash.Hash // blake3 key applied to chunk hashes in dedup answers
}

// KeySet is the set of public keys tokens are verified with (served as JWKS to edges).
func (k *Keys) KeySet() (*auth.KeySet, error) {
	return auth.NewKeySet(k.Signing.Public())
}

// Load reads the keys in dir, creating the missing ones from random (crypto/rand.Reader when
// nil). create=false turns a missing file into an error wrapping fs.ErrNotExist (the token
// subcommand must not invent a key the server does not have).
func Load(dir string, random io.Reader, create bool) (*Keys, error) {
	if random == nil {
		random = rand.Reader
	}
	if create {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("key directory: %w", err)
		}
	}
	var k Keys
	pemBytes, err := loadOrCreate(filepath.Join(dir, SigningFile), create, func() ([]byte, error) {
		sk, err := auth.NewSigningKey(random)
		if err != nil {
			return nil, err
		}
		return sk.MarshalPEM()
	})
	if err != nil {
		return nil, err
	}
	if k.Signing, err = auth.ParseSigningKeyPEM(pemBytes); err != nil {
		return nil, fmt.Errorf("%s: %w", SigningFile, err)
	}
	secret := func() ([]byte, error) {
		b := make([]byte, secretLen)
		if _, err := io.ReadFull(random, b); err != nil {
			return nil, fmt.Errorf("random key: %w", err)
		}
		return b, nil
	}
	if k.Transfer, err = loadOrCreate(filepath.Join(dir, TransferFile), create, secret); err != nil {
		return nil, err
	}
	d, err := loadOrCreate(filepath.Join(dir, DedupFile), create, secret)
	if err != nil {
		return nil, err
	}
	if len(k.Transfer) != secretLen || len(d) != secretLen {
		return nil, fmt.Errorf("%w: %s and %s must hold %d bytes", auth.ErrKeyFormat, TransferFile, DedupFile, secretLen)
	}
	copy(k.Dedup[:], d)
	return &k, nil
}

func loadOrCreate(path string, create bool, gen func() ([]byte, error)) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, fs.ErrNotExist) || !create {
		return nil, fmt.Errorf("read key: %w", err)
	}
	b, err = gen()
	if err != nil {
		return nil, err
	}
	if err := writeExclusive(path, b); err != nil {
		if errors.Is(err, fs.ErrExist) { // another process created it first: use theirs
			return os.ReadFile(path)
		}
		return nil, err
	}
	return b, nil
}

// writeExclusive writes b to path via a synced temporary file, linking it into place only if
// path does not exist yet (fs.ErrExist otherwise), then syncs the directory.
func writeExclusive(path string, b []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".tmp-key-*")
	if err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write key: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write key: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync key directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync key directory: %w", err)
	}
	return nil
}
