package join

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// Format is the version of the record's layout and cryptography that this
// kplane writes and reads.
const Format = 1

// kdf names the key derivation of Format 1.
const kdf = "pbkdf2-sha256"

// iterations of PBKDF2 for new records: a token guessed offline from a
// stolen datastore costs that many hashes per guess; it costs one
// derivation (a fraction of a second) per server start.
const iterations = 300_000

// maxIterations bounds what a record may ask for, so that a record does not
// turn one start into minutes of hashing.
const maxIterations = 10_000_000

// MinTokenLength is the shortest join token accepted: the token is the
// only secret between a copy of the datastore and the kplane CA key.
const MinTokenLength = 16

// ErrWrongToken is a record the token does not open: another token than
// the one it was sealed with, or a record altered since.
var ErrWrongToken = errors.New("the join token does not open the shared credentials stored in the datastore " +
	"(not the token the first server was started with, or the record was altered)")

// Credentials are what every server of one kplane shares: the files'
// contents (PEM, and the static token file's CSV) and the base URL of the
// planes' service-account issuers (a token names its issuer, so one
// accepted on every server needs one issuer on all).
type Credentials struct {
	CACert               []byte `json:"caCert"`
	CAKey                []byte `json:"caKey"`
	ServiceAccountKey    []byte `json:"serviceAccountKey"`
	Tokens               []byte `json:"tokens"`
	ServiceAccountIssuer string `json:"serviceAccountIssuer"`
}

// header is the record's clear part. All of it is the additional data of
// the seal, so none of it can be changed without the token.
type header struct {
	Format        int    `json:"format"`
	KplaneVersion string `json:"kplaneVersion"`
	KDF           string `json:"kdf"`
	Iterations    int    `json:"iterations"`
	Salt          []byte `json:"salt"`
	Nonce         []byte `json:"nonce"`
}

// record is what the datastore holds.
type record struct {
	header
	Sealed []byte `json:"sealed"`
}

// Seal encrypts creds under token, marking them written by kplane version.
func Seal(token, version string, creds Credentials) ([]byte, error) {
	h := header{Format: Format, KplaneVersion: version, KDF: kdf, Iterations: iterations,
		Salt: make([]byte, 16), Nonce: make([]byte, 12)}
	if _, err := rand.Read(h.Salt); err != nil {
		return nil, err
	}
	if _, err := rand.Read(h.Nonce); err != nil {
		return nil, err
	}
	aead, err := h.aead(token)
	if err != nil {
		return nil, err
	}
	plain, err := json.Marshal(creds)
	if err != nil {
		return nil, err
	}
	aad, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	return json.Marshal(record{header: h, Sealed: aead.Seal(nil, h.Nonce, plain, aad)})
}

// Open decrypts a record Seal wrote, for kplane version: it fails with one
// line on an unknown format, a token that does not open it (ErrWrongToken)
// or a record of another minor version.
func Open(token, version string, data []byte) (Credentials, error) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return Credentials{}, fmt.Errorf("the shared credentials stored in the datastore are not a kplane join record: %v", err)
	}
	if r.Format != Format || r.KDF != kdf {
		return Credentials{}, fmt.Errorf("the shared credentials stored in the datastore have format %d (%s), written by kplane %s; kplane %s reads format %d: run the same kplane version on every server",
			r.Format, r.KDF, r.KplaneVersion, version, Format)
	}
	if r.Iterations < 1 || r.Iterations > maxIterations || len(r.Nonce) != 12 {
		return Credentials{}, ErrWrongToken
	}
	aead, err := r.aead(token)
	if err != nil {
		return Credentials{}, err
	}
	aad, err := json.Marshal(r.header)
	if err != nil {
		return Credentials{}, err
	}
	plain, err := aead.Open(nil, r.Nonce, r.Sealed, aad)
	if err != nil {
		return Credentials{}, ErrWrongToken
	}
	if !Compatible(r.KplaneVersion, version) {
		return Credentials{}, fmt.Errorf("the shared credentials in the datastore were stored by kplane %s, this server is kplane %s: every server of one datastore must run the same minor version",
			r.KplaneVersion, version)
	}
	var creds Credentials
	if err := json.Unmarshal(plain, &creds); err != nil {
		return Credentials{}, fmt.Errorf("the shared credentials stored in the datastore: %v", err)
	}
	return creds, nil
}

// aead is AES-256-GCM under the key PBKDF2 derives from token with h's
// salt and iterations.
func (h header) aead(token string) (cipher.AEAD, error) {
	key, err := pbkdf2.Key(sha256.New, token, h.Salt, h.Iterations, 32)
	if err != nil {
		return nil, fmt.Errorf("deriving the join key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Compatible reports whether servers of versions a and b may share a
// datastore: the same major and minor version (patch releases mix), or,
// for builds without a release version (a commit), the same build.
func Compatible(a, b string) bool {
	va, errA := utilversion.ParseGeneric(a)
	vb, errB := utilversion.ParseGeneric(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return va.Major() == vb.Major() && va.Minor() == vb.Minor()
}
