// Package images holds what vcoil's local cluster needs to run container
// images without a registry: a writer of docker-archive tarballs (imageset),
// the program that builds the lab's images with it (mkimage), and the small
// static programs that go into them (pause, agent). The tarballs are imported
// into each node's containerd with `ctr -n k8s.io images import`.
package images
