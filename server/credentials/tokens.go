package credentials

import (
	"crypto/rand"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// AdminUser is the name of the generated admin identity.
const AdminUser = "kplane-admin"

// mastersGroup grants everything in every plane.
const mastersGroup = "system:masters"

// MinAdminTokenLength is the shortest admin token kplane accepts from the
// operator (--admin-token): the token also keys the signature of the CA
// served on /cacerts, so it must not be guessable offline.
const MinAdminTokenLength = 32

// ValidateAdminToken checks an operator-chosen admin token.
func ValidateAdminToken(token string) error {
	if len(token) < MinAdminTokenLength {
		return fmt.Errorf("--admin-token must be at least %d characters (e.g. openssl rand -hex 32)", MinAdminTokenLength)
	}
	for _, r := range token {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~+/=", r)) {
			return fmt.Errorf("--admin-token may hold only letters, digits and -._~+/=")
		}
	}
	return nil
}

// EnsureTokenFile returns the admin token from a kube-apiserver static token
// file (token,user,uid,"group1,group2"), creating the file when it does not
// exist with adminToken as the admin token, or a freshly generated one when
// adminToken is empty. The admin token is the first entry in the
// system:masters group; a given adminToken must be one of the file's
// system:masters tokens.
func EnsureTokenFile(path, adminToken string) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		token := adminToken
		if token == "" {
			if token, err = NewToken(); err != nil {
				return "", err
			}
		}
		line := fmt.Sprintf("%s,%s,%s,%q\n", token, AdminUser, AdminUser, mastersGroup)
		return token, writeFile(path, []byte(line), 0o600)
	}
	if err != nil {
		return "", err
	}
	records, err := csv.NewReader(strings.NewReader(string(data))).ReadAll()
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	first := ""
	for _, r := range records {
		if len(r) < 4 || !containsGroup(r[3], mastersGroup) {
			continue
		}
		token := strings.TrimSpace(r[0])
		if adminToken != "" && token == adminToken {
			return token, nil
		}
		if first == "" {
			first = token
		}
	}
	switch {
	case adminToken != "":
		return "", fmt.Errorf("token file %s was written with another admin token than --admin-token; add it as a %s entry or remove the file", path, mastersGroup)
	case first == "":
		return "", fmt.Errorf("token file %s has no %s entry for the admin kubeconfig; add one or remove the file to have one generated", path, mastersGroup)
	}
	return first, nil
}

func containsGroup(groups, group string) bool {
	for _, g := range strings.Split(groups, ",") {
		if strings.TrimSpace(g) == group {
			return true
		}
	}
	return false
}

// NewToken returns a random bearer token.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
