"""isp-flowvisor: the ISP-side OpenFlow 1.3 slicer between an aggregation switch and household controllers."""
