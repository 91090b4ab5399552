// Package testkit gives tests the servers the service talks to, as
// net/http/httptest gives them HTTP servers: Redis (RealRedis, NewRedis,
// RedisNodes, NewRedisCluster), etcd (EtcdClient, EtcdEndpoints) and MySQL
// (NewMySQL, OwnMySQL). Each is the server the environment names when it is
// set, as in CI (REDIS_ADDR, REDIS_CLUSTER, ETCD_ENDPOINTS, MYSQL_DSN), or
// else one of the test's own: a process when its binary is on PATH, an
// embedded one otherwise, so that the same tests run on a machine with
// nothing but Go. TestFuncs reads the names of a package's tests, for the
// tables that name the test of each row.
//
// It does not import the service, whose own packages (the lock's) test with
// it. The processes themselves are started by testkit/child, which binaries
// may link; this package links testing. testenv configures and starts the
// service for a test.
package testkit
