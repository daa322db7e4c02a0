"""Every method behind one interface: the restorer interface, the registry, the classical and graph
methods' factories, weights, the default rule and ensembles."""
