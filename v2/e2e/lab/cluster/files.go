package cluster

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/vcoil/vcoil/v2/e2e/lab/pki"
	"github.com/vcoil/vcoil/v2/e2e/lab/render"
	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
)

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, mode)
}

// controlPlane is where the control plane's files are.
func (c Config) controlPlane() render.ControlPlane {
	return render.ControlPlane{
		EtcdDataDir: c.path("etcd"),
		CAFile:      c.pki("ca.crt"), CAKeyFile: c.pki("ca.key"),
		APIServerCert: c.pki("apiserver.crt"), APIServerKey: c.pki("apiserver.key"),
		KubeletClientCert: c.pki("apiserver-kubelet-client.crt"), KubeletClientKey: c.pki("apiserver-kubelet-client.key"),
		ServiceAccountKey: c.pki("sa.key"), ServiceAccountPub: c.pki("sa.pub"),
		ControllerManagerKubeconfig: c.path("controller-manager.kubeconfig"),
		SchedulerKubeconfig:         c.path("scheduler.kubeconfig"),
		ServiceCIDRs:                c.Topology.ServiceCIDRs(),
	}
}

func (c Config) nodeFile(n topology.Node, name string) string {
	return filepath.Join(c.nodeDir(n), name)
}

// writeFiles makes the certificates, kubeconfigs and configurations of the
// whole lab.
func (c Config) writeFiles() error {
	ca, err := pki.NewCA("vcoil-lab-ca")
	if err != nil {
		return err
	}
	files := map[string][]byte{c.pki("ca.crt"): ca.CertPEM, c.pki("ca.key"): ca.KeyPEM}
	issue := func(name string, r pki.Request) (pki.Pair, error) {
		p, err := ca.Issue(r)
		if err != nil {
			return p, err
		}
		files[c.pki(name+".crt")], files[c.pki(name+".key")] = p.CertPEM, p.KeyPEM
		return p, nil
	}
	kubeconfig := func(path, user string, r pki.Request) error {
		r.Client = true
		p, err := ca.Issue(r)
		if err != nil {
			return err
		}
		b, err := render.Kubeconfig(topology.APIServerURL(), user, ca.CertPEM, p.CertPEM, p.KeyPEM)
		files[path] = b
		return err
	}
	if _, err := issue("apiserver", pki.Request{CommonName: "kube-apiserver", Server: true, IPs: render.APIServerIPs(c.Topology), DNSNames: render.APIServerDNSNames()}); err != nil {
		return err
	}
	if _, err := issue("apiserver-kubelet-client", pki.Request{CommonName: "kube-apiserver-kubelet-client", Organizations: []string{"system:masters"}, Client: true}); err != nil {
		return err
	}
	sa, saPub, err := pki.NewServiceAccountKey()
	if err != nil {
		return err
	}
	files[c.pki("sa.key")], files[c.pki("sa.pub")] = sa, saPub
	for path, r := range map[string]pki.Request{
		c.AdminKubeconfig():                          {CommonName: "lab-admin", Organizations: []string{"system:masters"}},
		c.controlPlane().ControllerManagerKubeconfig: {CommonName: "system:kube-controller-manager"},
		c.controlPlane().SchedulerKubeconfig:         {CommonName: "system:kube-scheduler"},
		c.path("router.kubeconfig"):                  {CommonName: "lab-router", Organizations: []string{"system:masters"}},
	} {
		if err := kubeconfig(path, r.CommonName, r); err != nil {
			return err
		}
	}
	files[c.path("resolv.conf")] = []byte(render.ResolvConf())
	for _, n := range c.Topology.NodeList() {
		serving, err := issue(n.Name+"-kubelet-serving", pki.Request{CommonName: n.Name, Server: true, DNSNames: []string{n.Name}, IPs: n.IPs()})
		if err != nil {
			return err
		}
		_ = serving
		if err := kubeconfig(c.nodeFile(n, "kubelet.kubeconfig"), "system:node:"+n.Name, pki.Request{CommonName: "system:node:" + n.Name, Organizations: []string{"system:nodes"}}); err != nil {
			return err
		}
		if err := kubeconfig(c.nodeFile(n, "kube-proxy.kubeconfig"), "system:kube-proxy", pki.Request{CommonName: "system:kube-proxy"}); err != nil {
			return err
		}
		files[c.nodeFile(n, "kubelet.yaml")] = []byte(render.KubeletConfig(render.Kubelet{
			NodeName: n.Name, CAFile: c.pki("ca.crt"),
			TLSCertFile: c.pki(n.Name + "-kubelet-serving.crt"), TLSKeyFile: c.pki(n.Name + "-kubelet-serving.key"),
			ResolvConf: c.path("resolv.conf"), CgroupRoot: cgroupRoot(n),
			DNS: c.Topology.DNSServiceIPs(),
		}))
		files[c.nodeFile(n, "kube-proxy.yaml")] = []byte(render.KubeProxyConfig(n, c.nodeFile(n, "kube-proxy.kubeconfig")))
		files[c.nodeFile(n, "containerd.toml")] = []byte(render.ContainerdConfig())
	}
	files[c.EnvFile()] = []byte(render.EnvFile(c.Topology, c.StateDir, c.AdminKubeconfig(), c.path("kubectl"), c.KubernetesDir, c.Agent))
	files[c.path("kubectl")] = []byte(fmt.Sprintf("#!/bin/sh\n# kubectl against the vcoil lab, run in its control plane's network namespace.\nexec nsenter --net=%s -- %s --kubeconfig %s \"$@\"\n",
		ControlPlaneNetnsPath(), c.kubectl(), c.AdminKubeconfig()))
	for path, data := range files {
		mode := os.FileMode(0o600)
		if path == c.path("kubectl") {
			mode = 0o755
		} else if filepath.Ext(path) == ".crt" || filepath.Ext(path) == ".yaml" || filepath.Ext(path) == ".toml" || filepath.Ext(path) == ".env" || filepath.Ext(path) == ".conf" || filepath.Ext(path) == ".pub" {
			mode = 0o644
		}
		if err := writeFile(path, data, mode); err != nil {
			return err
		}
	}
	return nil
}
