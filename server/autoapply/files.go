package autoapply

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"

	"kplane.dev/kplane/planes"
)

// ApplyToPlane applies the manifests at paths (files, or directories read
// as the manifests directory is) to plane, with the rules of the manifests
// directory: server-side apply as kplane-manifests, CRDs before the
// objects of their kinds. What `kplane planes create -f` does. A document
// that names another plane is refused; every other document goes to plane.
// loopback reaches the root plane as an admin. It returns how many objects
// were applied, and every failure.
func ApplyToPlane(ctx context.Context, loopback *rest.Config, plane string, paths []string) (int, error) {
	work, err := planeWork(plane, paths)
	if err != nil {
		return 0, err
	}
	t, err := newTargets(loopback, 30*time.Second)
	if err != nil {
		return 0, err
	}
	a := &Applier{config: Config{WaitTimeout: 30 * time.Second}, targets: t}
	a.apply(ctx, work)
	applied := 0
	var errs []error
	for _, w := range work {
		applied += len(w.docs) - len(w.errs)
		for _, e := range w.errs {
			errs = append(errs, fmt.Errorf("%s: %w", w.name, e))
		}
	}
	return applied, errors.Join(errs...)
}

// planeWork reads and parses every manifest at paths, all documents bound
// for plane; nothing is applied when one is unreadable or bad.
func planeWork(plane string, paths []string) ([]*fileWork, error) {
	var work []*fileWork
	for _, p := range paths {
		files := []string{p}
		if info, err := os.Stat(p); err != nil {
			return nil, err
		} else if info.IsDir() {
			if files, err = manifestFiles(p); err != nil {
				return nil, err
			}
		}
		for _, f := range files {
			data, err := readManifest(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			docs, err := parse(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			for i := range docs {
				if docs[i].plane != planes.Root && docs[i].plane != plane {
					return nil, fmt.Errorf("%s: document %d names plane %s; these manifests go to plane %s", f, docs[i].index, docs[i].plane, plane)
				}
				docs[i].plane = plane
			}
			work = append(work, &fileWork{path: f, name: f, docs: docs, quiet: true})
		}
	}
	if len(work) == 0 {
		return nil, fmt.Errorf("no manifests (.yaml, .yml, .json) at %v", paths)
	}
	return work, nil
}

// CheckManifests reports why the manifests at paths cannot be applied to
// plane (unreadable, not valid, bound for another plane), before anything
// is created.
func CheckManifests(plane string, paths []string) error {
	_, err := planeWork(plane, paths)
	return err
}
