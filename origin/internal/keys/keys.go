// Package keys keeps the origin's secret key material in its key directory:
//
//	<dir>/signing.pem   Ed25519 private key (PKCS#8 PEM) that signs access tokens
//	<dir>/transfer.key  32 random bytes: HMAC key of signed transfer URLs
//	<dir>/dedup.key     32 random bytes: HMAC key of chunk hashes in global-dedup answers
//
// Load creates missing files on first start (mode 0600, directory 0700, written to a temporary
// file, synced and renamed, so a crash never leaves a half-written key) and reads existing ones
// otherwise; the `token` subcommand reads the same files. Origin replicas, which must sign and
// verify alike whatever their data directories, derive the same keys from a shared secret
// instead (FromSecret).
package keys

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
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
	// Previous are public keys that still verify tokens but sign nothing: the key of a shared
	// secret being rotated out (FromSecret).
	Previous []auth.PublicKey
}

// KeySet is the set of public keys tokens are verified with (served as JWKS to edges).
func (k *Keys) KeySet() (*auth.KeySet, error) {
	return auth.NewKeySet(append([]auth.PublicKey{k.Signing.Public()}, k.Previous...)...)
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

// ---- keys from a shared secret (origin replicas) ---------------------------------------------

// MinSecretLen is the shortest shared secret FromSecret accepts: 32 bytes, as many as each key
// it derives (e.g. `openssl rand -base64 48`).
const MinSecretLen = 32

// ErrSecret wraps every problem with a shared secret.
var ErrSecret = errors.New("keys: bad shared secret")

// Labels of the keys derived from a shared secret (HKDF-SHA256 info strings). Changing one
// changes that key on every replica at once; they are part of the deployment's compatibility.
const (
	labelSigning  = "xetcdn origin token signing key v1"
	labelTransfer = "xetcdn origin transfer URL key v1"
	labelDedup    = "xetcdn origin dedup key v1"
)

// FromSecret derives the origin's keys from a shared secret instead of the key directory, so
// that every replica given the same secret signs and verifies alike whatever its data directory
// (docs/origin.md, "Origin replicas"): the Ed25519 token key from an HKDF-SHA256 seed, the
// transfer-URL and dedup keys likewise, each under its own label. previous, when not nil, is the
// secret being rotated out: tokens signed with its key still verify (its public key is in
// KeySet, so edges accept them too) but nothing is signed with it. Transfer URLs and dedup
// answers use the current secret's keys only; a transfer URL signed before a rotation gets a
// 403 and the client asks for new URLs (docs/protocol.md §2.10).
func FromSecret(secret, previous []byte) (*Keys, error) {
	k, err := derive(secret)
	if err != nil {
		return nil, err
	}
	if previous != nil {
		p, err := derive(previous)
		if err != nil {
			return nil, fmt.Errorf("previous secret: %w", err)
		}
		if p.Signing.ID != k.Signing.ID {
			k.Previous = append(k.Previous, p.Signing.Public())
		}
	}
	return k, nil
}

func derive(secret []byte) (*Keys, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("%w: %d bytes, want at least %d", ErrSecret, len(secret), MinSecretLen)
	}
	key := func(label string) ([]byte, error) {
		return hkdf.Key(sha256.New, secret, nil, label, secretLen)
	}
	seed, err := key(labelSigning)
	if err != nil {
		return nil, err
	}
	priv := ed25519.NewKeyFromSeed(seed)
	k := Keys{Signing: &auth.SigningKey{ID: auth.KeyID(priv.Public().(ed25519.PublicKey)), Private: priv}}
	if k.Transfer, err = key(labelTransfer); err != nil {
		return nil, err
	}
	d, err := key(labelDedup)
	if err != nil {
		return nil, err
	}
	copy(k.Dedup[:], d)
	return &k, nil
}
