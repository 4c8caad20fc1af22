package vm

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// CheckpointSignature is the ed25519 signature of a checkpoint's manifest
// (CheckpointManifest, which holds every other file's SHA-256) by the
// node that wrote it. A checkpoint that comes in an image, which the pod
// author controls, is restored only when a key the node trusts signed
// it: its state file holds a domain definition libvirt parses and a QEMU
// migration stream, which QEMU does not treat as trusted input.
const CheckpointSignature = "vmpod.sig"

// SignCheckpoint signs the manifest of the checkpoint in dir with key.
func SignCheckpoint(dir string, key ed25519.PrivateKey) error {
	data, err := readManifest(dir)
	if err != nil {
		return err
	}
	if err := writeNew(filepath.Join(dir, CheckpointSignature), ed25519.Sign(key, data)); err != nil {
		return fmt.Errorf("sign checkpoint %s: %v: %w", dir, err, errdefs.ErrInternal)
	}
	return nil
}

// VerifyCheckpoint checks that one of trust signed the manifest of the
// checkpoint in dir (FailedPrecondition when the node trusts no key,
// InvalidArgument when no trusted key signed it). ReadCheckpoint then
// checks the files against the manifest.
func VerifyCheckpoint(dir string, trust []ed25519.PublicKey) error {
	if len(trust) == 0 {
		return fmt.Errorf("checkpoint %s: this node restores no checkpoint from an image: it trusts no signing key (--state-trust-keys): %w",
			dir, errdefs.ErrFailedPrecondition)
	}
	data, err := readManifest(dir)
	if err != nil {
		return err
	}
	sig, err := readSmall(filepath.Join(dir, CheckpointSignature), ed25519.SignatureSize)
	if err != nil {
		return fmt.Errorf("checkpoint %s: not signed (%s: %v); only checkpoints signed by a key this node trusts are restored: %w",
			dir, CheckpointSignature, err, errdefs.ErrInvalidArgument)
	}
	for _, k := range trust {
		if ed25519.Verify(k, data, sig) {
			return nil
		}
	}
	return fmt.Errorf("checkpoint %s: not signed by a key this node trusts (--state-trust-keys); restore refused: %w", dir, errdefs.ErrInvalidArgument)
}

// readManifest reads the manifest's bytes, bounded, without following a
// link.
func readManifest(dir string) ([]byte, error) {
	data, err := readSmall(filepath.Join(dir, CheckpointManifest), maxManifestBytes)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %s: %v: %w", dir, CheckpointManifest, err, errdefs.ErrInvalidArgument)
	}
	return data, nil
}

// readSmall reads a regular file of at most max bytes, not through a link.
func readSmall(path string, max int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("a %s, not a regular file", fi.Mode().Type())
	case fi.Size() > int64(max):
		return nil, fmt.Errorf("%d bytes, above %d", fi.Size(), max)
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && int64(len(b)) != fi.Size() {
		return nil, err
	}
	return b, nil
}

// LoadSigningKey reads an ed25519 private key, PEM-encoded PKCS #8 (what
// `openssl genpkey -algorithm ed25519` writes).
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("state signing key: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("state signing key %s: no PEM PRIVATE KEY block (want ed25519, PKCS #8: openssl genpkey -algorithm ed25519): %w", path, errdefs.ErrInvalidArgument)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("state signing key %s: %v: %w", path, err, errdefs.ErrInvalidArgument)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("state signing key %s: a %T, want ed25519: %w", path, k, errdefs.ErrInvalidArgument)
	}
	return ek, nil
}

// LoadTrustKeys reads ed25519 public keys, PEM-encoded PKIX (`openssl pkey
// -pubout`), any number per file.
func LoadTrustKeys(paths []string) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("state trust keys: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		n := 0
		for {
			var b *pem.Block
			b, data = pem.Decode(data)
			if b == nil {
				break
			}
			if b.Type != "PUBLIC KEY" {
				continue
			}
			k, err := x509.ParsePKIXPublicKey(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("state trust keys %s: %v: %w", p, err, errdefs.ErrInvalidArgument)
			}
			ek, ok := k.(ed25519.PublicKey)
			if !ok {
				return nil, fmt.Errorf("state trust keys %s: a %T, want ed25519: %w", p, k, errdefs.ErrInvalidArgument)
			}
			keys = append(keys, ek)
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("state trust keys %s: no PEM PUBLIC KEY block (want ed25519: openssl pkey -pubout): %w", p, errdefs.ErrInvalidArgument)
		}
	}
	return keys, nil
}
