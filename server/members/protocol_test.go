package members

import "testing"

// A new member starts with every member of the cluster, itself (added,
// not started, so unnamed) under its own name.
func TestInitialCluster(t *testing.T) {
	r := AddResponse{ID: "2a", Members: []Member{
		{Name: "kplane-1", PeerURLs: []string{"https://10.0.0.1:2380"}},
		{Name: "", PeerURLs: []string{"https://10.0.0.3:2380"}},
		{Name: "kplane-2", PeerURLs: []string{"https://10.0.0.2:2380"}},
	}}
	got := r.InitialCluster("kplane-3", "https://10.0.0.3:2380")
	want := "kplane-1=https://10.0.0.1:2380,kplane-3=https://10.0.0.3:2380,kplane-2=https://10.0.0.2:2380"
	if got != want {
		t.Fatalf("InitialCluster:\n got %s\nwant %s", got, want)
	}
}
