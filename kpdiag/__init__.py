"""kpdiag: why does traffic to a Kubernetes Service not arrive?"""

__version__ = "0.1.0"
