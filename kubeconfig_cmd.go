package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/tools/clientcmd"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/server"
)

func kubeconfigCommand() *cli.Command {
	return &cli.Command{
		Name:      "kubeconfig",
		Usage:     "print a kubeconfig for plane <id>",
		ArgsUsage: "<id>",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Value: server.DefaultDataDir(), EnvVars: []string{"KPLANE_DATA_DIR"}},
			&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KPLANE_KUBECONFIG"}, Usage: "admin kubeconfig (default <data-dir>/admin.kubeconfig)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("want exactly one plane id")
			}
			id := c.Args().First()
			if err := planes.ValidateID(id); err != nil {
				return err
			}
			path := c.String("kubeconfig")
			if path == "" {
				path = filepath.Join(c.String("data-dir"), "admin.kubeconfig")
			}
			cfg, err := clientcmd.LoadFromFile(path)
			if err != nil {
				return err
			}
			for _, cluster := range cfg.Clusters {
				cluster.Server += planes.Path(id)
			}
			out, err := clientcmd.Write(*cfg)
			if err != nil {
				return err
			}
			_, err = os.Stdout.Write(out)
			return err
		},
	}
}
