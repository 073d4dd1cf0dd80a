// Package members lets kplane servers form one embedded etcd cluster, as
// k3s's --cluster-init and --server do, with kplane's own protocol over the
// servers' HTTPS port.
//
// A server started with --cluster-init and a join token runs the first
// member. A server started with --server https://first:6443 and the same
// token on an empty data dir joins it in three steps, each checked before
// the next, so that a refusal (wrong token, another version) leaves the
// cluster as it was:
//
//  1. Trust: GET /cacerts over an unverified connection; the CA comes with
//     an HMAC of it keyed with the join token (credentials.SignCA), which
//     only a server knowing the token can make. Every later request is
//     verified against that CA, and carries the token.
//  2. Credentials: GET /kplane/etcd/credentials returns the record the
//     first server sealed in the datastore with the token (server/join);
//     the joiner opens it (token, version) and writes the CA, its key,
//     the signing key and token file into its data dir, and issues its
//     own peer certificate from that CA.
//  3. Membership: POST /kplane/etcd/members adds the joiner as a learner
//     (a learner does not count towards the quorum, so a joiner that never
//     starts cannot stall the cluster) and returns the members it starts
//     with; once started, it asks POST /kplane/etcd/promote until the
//     leader finds it caught up and makes it a voting member.
//
// A join that fails after its learner was added (the member does not
// start, or is not promoted in time) removes that learner again with
// DELETE /kplane/etcd/members, which removes learners only, so that it
// does not hold etcd's one learner place.
//
// A restarted member has its etcd data: it is a member already (no new
// add), and only asks to be promoted if it is still a learner.
package members
