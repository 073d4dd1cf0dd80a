// Package credtest gives tests certificates from a kplane CA of their
// own, made as a server makes its credentials.
package credtest
