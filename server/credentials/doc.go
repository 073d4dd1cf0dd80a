// Package credentials owns everything kplane generates on first start and
// reuses afterwards: the CA, the serving and datastore certificates, the
// service-account signing key, the static token file with the admin token,
// and the kubeconfigs handed to users. Files are written atomically with
// mode 0600 (certificates 0644).
package credentials
