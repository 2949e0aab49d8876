//! Synthetic addresses: allowed names to addresses out of `network::SYNTHETIC` and back. (Skeleton: the
//! egress-proxy helper implements it.)
