// Package quota is what ResourceQuota admission and the resource-quota
// controller share to measure usage per plane: listers that read one
// plane's objects from the shared watch caches, and the upstream quota
// evaluators built on them.
package quota
