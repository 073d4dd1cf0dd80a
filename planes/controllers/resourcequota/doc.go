// Package resourcequota keeps status.used of every plane's ResourceQuotas:
// upstream's resource-quota controller's sync (quota.CalculateUsage with
// the upstream evaluators) and replenishment rules, driven by the hub's
// events of all planes instead of informers and monitors per cluster.
package resourcequota
