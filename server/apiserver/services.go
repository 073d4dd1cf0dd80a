package apiserver

import (
	"fmt"
	"net"

	netutils "k8s.io/utils/net"

	"kplane.dev/kplane/planes/services"
)

func servicesConfig(c *Config) services.Config {
	return services.Config{ClusterIPRange: c.ServiceClusterIPRange, NodePortRange: c.NodePortRange}
}

// firstServiceIP is the first address of the range: the ClusterIP of every
// plane's default/kubernetes Service, as in kube-apiserver.
func firstServiceIP(cidr net.IPNet) (net.IP, error) {
	ip, err := netutils.GetIndexedIP(&cidr, 1)
	if err != nil {
		return nil, fmt.Errorf("service cluster IP range %s: %w", cidr.String(), err)
	}
	return ip, nil
}
