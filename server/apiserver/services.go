package apiserver

import (
	"net"

	"kplane.dev/kplane/planes/services"
)

func servicesConfig(c *Config) services.Config {
	return services.Config{ClusterIPRange: c.ServiceClusterIPRange, NodePortRange: c.NodePortRange}
}

// firstServiceIP is the first address of the range: the ClusterIP of every
// plane's default/kubernetes Service, as in kube-apiserver.
func firstServiceIP(cidr net.IPNet) net.IP {
	ip := append(net.IP(nil), cidr.IP...)
	for i := len(ip) - 1; i >= 0; i-- {
		ip[i]++
		if ip[i] != 0 {
			break
		}
	}
	return ip
}
