//! The leashed sandboxes' name server. (Skeleton: the egress-proxy helper implements it.)
