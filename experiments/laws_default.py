"""The default i.i.d. laws of the paper-style experiments (mu from about 0.2 to 3 nats)."""

# label -> SPEC; the order fixes each law's colour in every figure
IID_LAWS = {
    "peaked fixed (0.95/0.04/0.01)": "fixed:probs=0.95/0.04/0.01",
    "Dirichlet V=8, a=0.1": "dirichlet:V=8,alpha=0.1",
    "Dirichlet V=50, a=0.05": "dirichlet:V=50,alpha=0.05",
    "Zipf V=1000, s~1.6": "zipf:V=1000,s=1.6,s_sd=0.25",
    "logit-normal V=100, s=2": "logitnormal:V=100,sigma=2",
}
