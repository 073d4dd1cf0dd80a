// Package volumes binds the PersistentVolumeClaims of every plane: a
// claim gets a PersistentVolume of its own at once, as a dynamic
// provisioner and the PV controller would give it, and the volume goes
// with its claim. Nothing is stored on the host.
package volumes
