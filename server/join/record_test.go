package join

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

var testCredentials = Credentials{
	CACert: []byte("ca cert"), CAKey: []byte("ca key"),
	ServiceAccountKey: []byte("sa key"), Tokens: []byte("t,kplane-admin,kplane-admin,\"system:masters\"\n"),
	ServiceAccountIssuer: "https://kplane-1.example:6443",
}

const testToken = "0123456789abcdef-join"

func TestSealOpenRoundTrip(t *testing.T) {
	sealed, err := Seal(testToken, "v1.4.2", testCredentials)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("ca key")) || bytes.Contains(sealed, testCredentials.Tokens) {
		t.Fatalf("the record holds the credentials in clear: %s", sealed)
	}
	got, err := Open(testToken, "v1.4.7", sealed)
	if err != nil {
		t.Fatal(err)
	}
	if !equal(got, testCredentials) || got.ServiceAccountIssuer != testCredentials.ServiceAccountIssuer {
		t.Fatalf("opened %+v, sealed %+v", got, testCredentials)
	}
	again, _ := Seal(testToken, "v1.4.2", testCredentials)
	if bytes.Equal(again, sealed) {
		t.Fatal("two seals of the same credentials are identical: salt or nonce is not random")
	}
}

func TestOpenRefusesAWrongToken(t *testing.T) {
	sealed, err := Seal(testToken, "v1.4.2", testCredentials)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(testToken+"x", "v1.4.2", sealed); !errors.Is(err, ErrWrongToken) {
		t.Fatalf("wrong token: %v", err)
	}
}

// TestOpenDetectsTampering changes one part of a record at a time: each is
// refused as not opening, none yields credentials.
func TestOpenDetectsTampering(t *testing.T) {
	sealed, err := Seal(testToken, "v1.4.2", testCredentials)
	if err != nil {
		t.Fatal(err)
	}
	tamper := map[string]func(r *record){
		"a ciphertext bit":  func(r *record) { r.Sealed[len(r.Sealed)/2] ^= 1 },
		"the tag":           func(r *record) { r.Sealed[len(r.Sealed)-1] ^= 0x80 },
		"the version":       func(r *record) { r.KplaneVersion = "v1.4.3" },
		"the salt":          func(r *record) { r.Salt[0] ^= 1 },
		"the nonce":         func(r *record) { r.Nonce[0] ^= 1 },
		"the iterations":    func(r *record) { r.Iterations-- },
		"a truncated seal":  func(r *record) { r.Sealed = r.Sealed[:len(r.Sealed)-3] },
		"an emptied record": func(r *record) { r.Sealed = nil },
	}
	for name, change := range tamper {
		t.Run(name, func(t *testing.T) {
			var r record
			if err := json.Unmarshal(sealed, &r); err != nil {
				t.Fatal(err)
			}
			change(&r)
			altered, _ := json.Marshal(r)
			if _, err := Open(testToken, "v1.4.2", altered); !errors.Is(err, ErrWrongToken) {
				t.Fatalf("a record with %s changed: %v", name, err)
			}
		})
	}
}

func TestOpenRefusesAnotherMinorVersion(t *testing.T) {
	sealed, err := Seal(testToken, "v1.4.2", testCredentials)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(testToken, "v1.5.0", sealed)
	if err == nil || !strings.Contains(err.Error(), "stored by kplane v1.4.2, this server is kplane v1.5.0") {
		t.Fatalf("another minor: %v", err)
	}
}

func TestOpenRefusesAnUnknownFormat(t *testing.T) {
	sealed, err := Seal(testToken, "v1.4.2", testCredentials)
	if err != nil {
		t.Fatal(err)
	}
	var r record
	if err := json.Unmarshal(sealed, &r); err != nil {
		t.Fatal(err)
	}
	r.Format = Format + 1
	future, _ := json.Marshal(r)
	_, err = Open(testToken, "v1.4.2", future)
	if err == nil || !strings.Contains(err.Error(), "have format 2") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("unknown format: %v", err)
	}
	if _, err := Open(testToken, "v1.4.2", []byte("not json")); err == nil {
		t.Fatal("a record that is not JSON opened")
	}
}

func TestCompatible(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"v1.4.2", "v1.4.9", true},
		{"v1.4.2", "v1.5.0", false},
		{"v1.4.2", "v2.4.2", false},
		{"v0.3.0-12-gabcdef0-dirty", "v0.3.1", true},
		{"dev", "dev", true},
		{"dev", "v1.4.2", false},
		{"4daa070", "4daa070", true},
		{"4daa070", "210b612", false},
	} {
		if got := Compatible(c.a, c.b); got != c.want {
			t.Errorf("Compatible(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// equal compares the credentials kept in files.
func equal(a, b Credentials) bool {
	return bytes.Equal(a.CACert, b.CACert) && bytes.Equal(a.CAKey, b.CAKey) &&
		bytes.Equal(a.ServiceAccountKey, b.ServiceAccountKey) && bytes.Equal(a.Tokens, b.Tokens)
}
