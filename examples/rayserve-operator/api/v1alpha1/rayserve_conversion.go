package v1alpha1

// Hub marks v1alpha1, the stored version, as the version every other one
// converts to and from.
func (*RayServe) Hub() {}
