"""The on-prem providers ``ibnetdiscover`` and ``netq`` (``provider``): the ibnetdiscover dump parser
(``ibnetdiscover``), the NetQ / NMX-M reader (``netq``) and its HTTP client (``netq_http``).
"""
