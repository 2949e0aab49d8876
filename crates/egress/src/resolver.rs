//! Name resolution on the host, for the proxy's upstream connections. (Skeleton: the egress-proxy helper.)
