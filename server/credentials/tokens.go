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

// EnsureTokenFile returns the admin token from a kube-apiserver static token
// file (token,user,uid,"group1,group2"), creating the file with a freshly
// generated admin token when it does not exist. The admin token is the
// first entry in the system:masters group.
func EnsureTokenFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		token, err := NewToken()
		if err != nil {
			return "", err
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
	for _, r := range records {
		if len(r) >= 4 && containsGroup(r[3], mastersGroup) {
			return strings.TrimSpace(r[0]), nil
		}
	}
	return "", fmt.Errorf("token file %s has no %s entry for the admin kubeconfig; add one or remove the file to have one generated", path, mastersGroup)
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
