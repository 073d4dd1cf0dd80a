package v1beta1

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/conversion"

	"kplane.dev/kplane/examples/rayserve-operator/api/v1alpha1"
)

var _ conversion.Convertible = &RayServe{}

// ConvertTo converts this RayServe to the hub (v1alpha1).
func (src *RayServe) ConvertTo(dstRaw conversion.Hub) error {
	dst, ok := dstRaw.(*v1alpha1.RayServe)
	if !ok {
		return fmt.Errorf("convert to %T: unsupported hub", dstRaw)
	}
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec = v1alpha1.RayServeSpec{
		Image:       src.Spec.Server.Image,
		Port:        src.Spec.Server.Port,
		Replicas:    src.Spec.Replicas,
		ServeConfig: src.Spec.ServeConfig,
		ServiceType: src.Spec.ServiceType,
		Suspend:     src.Spec.Suspend,
	}
	dst.Status = src.Status
	return nil
}

// ConvertFrom converts the hub (v1alpha1) to this version.
func (dst *RayServe) ConvertFrom(srcRaw conversion.Hub) error {
	src, ok := srcRaw.(*v1alpha1.RayServe)
	if !ok {
		return fmt.Errorf("convert from %T: unsupported hub", srcRaw)
	}
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec = RayServeSpec{
		Server:      ServerSpec{Image: src.Spec.Image, Port: src.Spec.Port},
		Replicas:    src.Spec.Replicas,
		ServeConfig: src.Spec.ServeConfig,
		ServiceType: src.Spec.ServiceType,
		Suspend:     src.Spec.Suspend,
	}
	dst.Status = src.Status
	return nil
}
