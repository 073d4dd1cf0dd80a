// Package planes owns the identity of a plane: what a valid plane id is, how
// the id travels with a request (the context), and the server-owned
// annotation that records which plane an object belongs to.
//
// Everything plane-aware in kplane (routing, storage, admission, bootstrap,
// controllers) reads the plane from here; nothing else defines it.
package planes
