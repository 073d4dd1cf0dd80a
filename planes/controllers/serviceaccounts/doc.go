// Package serviceaccounts keeps, in every active namespace of every plane,
// the `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap with
// the CA that signs the server's certificate (what upstream's
// serviceaccounts-controller and root-ca-cert-publisher do per cluster).
package serviceaccounts
