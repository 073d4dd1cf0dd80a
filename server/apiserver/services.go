package apiserver

import "kplane.dev/kplane/planes/services"

func servicesConfig(c *Config) services.Config {
	return services.Config{ClusterIPRange: c.ServiceClusterIPRange, NodePortRange: c.NodePortRange}
}
