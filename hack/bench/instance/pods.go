// What each pod of the instance costs: its processes (pause, containers) found by the pod's
// cgroup, and the containerd shim that runs its sandbox, found by the sandbox's ID.

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// podCosts prints, for every pod of the instance, the sum of its processes' RSS and CPU and each
// process's RSS (the program of each container, pause, the shim), add-ons (the pods of
// kube-system) first.
func podCosts(kubeconfig string, procs []procRSS) error {
	names, err := podNames(kubeconfig)
	if err != nil {
		return err
	}
	byPod := map[string][]procRSS{} // pod UID -> its processes
	sandboxPod := map[string]string{}
	for _, pr := range procs {
		uid, cid := podOfCgroup(pr.pid)
		if uid == "" {
			continue
		}
		byPod[uid] = append(byPod[uid], pr)
		sandboxPod[cid] = uid
	}
	for _, pr := range procs {
		if uid, ok := sandboxPod[shimID(pr.pid)]; ok && pr.comm == "containerd-shim" {
			byPod[uid] = append(byPod[uid], pr)
		}
	}
	uids := make([]string, 0, len(byPod))
	for uid := range byPod {
		uids = append(uids, uid)
	}
	sort.Slice(uids, func(i, j int) bool {
		a, b := names[uids[i]], names[uids[j]]
		if sa, sb := strings.HasPrefix(a, "kube-system/"), strings.HasPrefix(b, "kube-system/"); sa != sb {
			return sa
		}
		return a < b
	})
	fmt.Println("per pod (add-ons are the pods of kube-system):")
	for _, uid := range uids {
		var sum, anon int64
		var cores, wakeups float64
		var parts []string
		for _, pr := range byPod[uid] {
			sum, anon, cores, wakeups = sum+pr.rssKB, anon+pr.anonKB, cores+pr.cores, wakeups+pr.wakeups
			parts = append(parts, fmt.Sprintf("%s %.1f", pr.comm, float64(pr.rssKB)/1024))
		}
		name := names[uid]
		if name == "" {
			name = "pod " + uid
		}
		fmt.Printf("  %-56s %7.1f MB (own %5.1f MB) %6.4f core %7.1f wakeups/s = %s\n", name, float64(sum)/1024, float64(anon)/1024, cores, wakeups, strings.Join(parts, " + "))
	}
	return nil
}

// podNames maps pod UIDs to namespace/name, from the instance's API server.
func podNames(kubeconfig string) (map[string]string, error) {
	var list struct {
		Items []struct {
			Metadata struct{ Name, Namespace, UID string } `json:"metadata"`
		} `json:"items"`
	}
	if err := kubectlGet(kubeconfig, "pods", &list); err != nil {
		return nil, err
	}
	names := map[string]string{}
	for _, p := range list.Items {
		names[p.Metadata.UID] = p.Metadata.Namespace + "/" + p.Metadata.Name
	}
	return names, nil
}

// podOfCgroup returns the pod UID and the container ID of a process in a pod's cgroup
// (.../kubepods/<qos>/pod<UID>/<container ID>, the kubelet's cgroupfs layout).
func podOfCgroup(pid int) (uid, cid string) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		dir, leaf := filepath.Split(parts[2])
		if u, ok := strings.CutPrefix(filepath.Base(dir), "pod"); ok {
			return u, leaf
		}
	}
	return "", ""
}

// shimID returns the -id argument of a containerd shim's command line: the sandbox it runs.
func shimID(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	args := strings.Split(string(data), "\x00")
	for i, a := range args {
		if a == "-id" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
