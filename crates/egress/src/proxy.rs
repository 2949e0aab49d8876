//! The proxy every leashed sandbox's connection ends at. (Skeleton: the egress-proxy helper implements it.)
